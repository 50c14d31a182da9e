# The two commands of the README. Both create or reuse .venv.
.PHONY: setup serve test

setup:
	@bash tools/setup_env.sh

# A real vLLM engine on the tiny test model plus the frontend on port 8000.
serve: setup
	@bash tools/serve_local.sh

# Two workers: real engines start in ~30 s of mostly one core each, so the
# suite's wall time nearly halves on two cores (TEST_WORKERS=0: one process).
TEST_WORKERS ?= 2
test: setup
	.venv/bin/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)
