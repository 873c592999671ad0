"""An importable Celery app for the worker processes that tests/test_celery.py starts."""
