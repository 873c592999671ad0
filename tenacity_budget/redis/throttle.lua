-- One flush of a tenacity-budget adaptive throttle, atomic: add this process's counts,
-- read the fleet's. The rule itself (AdaptiveThrottle, tenacity_budget/throttle.py) is
-- computed by each process from the counts returned.
-- KEYS[1]: the throttle's hash; KEYS[2]: test hook, microseconds added to the server's TIME.
-- ARGV: slice width (microseconds), key lifetime (ms), then triples of (age, requests,
-- accepts): counts made <age> microseconds before the script was sent, counted in the slice
-- they were made in (dropped if it has left the window). Returns {requests, accepts} over
-- the last 10 slices.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local offset = redis.call('GET', KEYS[2])
if offset then now = now + tonumber(offset) end
local n = 10
local width = tonumber(ARGV[1])
local slice = math.floor(now / width)
local fields = {'last'}
for i = 0, n - 1 do
  fields[#fields + 1] = 's' .. i
  fields[#fields + 1] = 'r' .. i
  fields[#fields + 1] = 'a' .. i
end
local v = redis.call('HMGET', KEYS[1], unpack(fields))
local last = tonumber(v[1])
local shift = 0
if last and last > slice then
  shift = last - slice
  slice = last
end
local S, R, A, changed = {}, {}, {}, {}
for i = 0, n - 1 do
  S[i] = tonumber(v[2 + 3 * i])
  R[i] = tonumber(v[3 + 3 * i]) or 0
  A[i] = tonumber(v[4 + 3 * i]) or 0
end
for j = 3, #ARGV - 2, 3 do
  local s = math.floor((now - tonumber(ARGV[j])) / width) + shift
  if s > slice then s = slice end
  if s > slice - n then
    local p = s % n
    if not S[p] or S[p] < s then
      S[p], R[p], A[p] = s, 0, 0
    end
    if S[p] == s then
      R[p] = R[p] + tonumber(ARGV[j + 1])
      A[p] = A[p] + tonumber(ARGV[j + 2])
      changed[p] = true
    end
  end
end
local requests, accepts = 0, 0
for i = 0, n - 1 do
  if S[i] and S[i] > slice - n then
    requests = requests + R[i]
    accepts = accepts + A[i]
  end
end
if next(changed) then
  local function int(x) return string.format('%.0f', x) end
  local args = {'last', int(slice)}
  for i = 0, n - 1 do
    if changed[i] then
      args[#args + 1] = 's' .. i
      args[#args + 1] = int(S[i])
      args[#args + 1] = 'r' .. i
      args[#args + 1] = int(R[i])
      args[#args + 1] = 'a' .. i
      args[#args + 1] = int(A[i])
    end
  end
  redis.call('HSET', KEYS[1], unpack(args))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {requests, accepts}
