-- One decision of a tenacity-budget retry budget, atomic.
-- The grant rule is BudgetTerms.grants (tenacity_budget/retry_budget.py), in units:
-- reserve + per_deposit * deposits >= cost * (withdrawals + 1); tests/test_redis_budget.py
-- pins the two together on a grid.
-- KEYS[1]: the budget's hash; KEYS[2]: test hook, microseconds added to the server's TIME.
-- ARGV: '1' to withdraw one retry, slice width (microseconds), units per deposit, units
-- per retry, floor (units), key lifetime (ms), then pairs of (age, deposits): deposits
-- made <age> microseconds before the script was sent, counted in the slice they were made
-- in (dropped if it has left the window). Returns {granted, balance}.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local offset = redis.call('GET', KEYS[2])
if offset then now = now + tonumber(offset) end
local n = 10
local width = tonumber(ARGV[2])
local slice = math.floor(now / width)
local fields = {'last'}
for i = 0, n - 1 do
  fields[#fields + 1] = 's' .. i
  fields[#fields + 1] = 'd' .. i
  fields[#fields + 1] = 'w' .. i
end
local v = redis.call('HMGET', KEYS[1], unpack(fields))
local last = tonumber(v[1])
local shift = 0
if last and last > slice then
  shift = last - slice
  slice = last
end
local S, D, W, changed = {}, {}, {}, {}
for i = 0, n - 1 do
  S[i] = tonumber(v[2 + 3 * i])
  D[i] = tonumber(v[3 + 3 * i]) or 0
  W[i] = tonumber(v[4 + 3 * i]) or 0
end
local function slot(s)
  local p = s % n
  if not S[p] or S[p] < s then
    S[p], D[p], W[p] = s, 0, 0
  end
  if S[p] ~= s then return nil end
  changed[p] = true
  return p
end
for j = 7, #ARGV - 1, 2 do
  local s = math.floor((now - tonumber(ARGV[j])) / width) + shift
  if s > slice then s = slice end
  if s > slice - n then
    local p = slot(s)
    if p then D[p] = D[p] + tonumber(ARGV[j + 1]) end
  end
end
local deposits, withdrawals = 0, 0
for i = 0, n - 1 do
  if S[i] and S[i] > slice - n then
    deposits = deposits + D[i]
    withdrawals = withdrawals + W[i]
  end
end
local per_deposit, cost, reserve = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local granted = 0
if ARGV[1] == '1' and reserve + per_deposit * deposits >= cost * (withdrawals + 1) then
  granted = 1
  withdrawals = withdrawals + 1
  local p = slot(slice)
  W[p] = W[p] + 1
end
if next(changed) then
  local function int(x) return string.format('%.0f', x) end
  local args = {'last', int(slice)}
  for i = 0, n - 1 do
    if changed[i] then
      args[#args + 1] = 's' .. i
      args[#args + 1] = int(S[i])
      args[#args + 1] = 'd' .. i
      args[#args + 1] = int(D[i])
      args[#args + 1] = 'w' .. i
      args[#args + 1] = int(W[i])
    end
  end
  redis.call('HSET', KEYS[1], unpack(args))
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
local free = reserve + per_deposit * deposits - cost * withdrawals
local balance = 0
if free > 0 then balance = math.floor(free / cost) end
return {granted, balance}
