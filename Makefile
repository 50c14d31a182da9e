# The two commands of the README. Both create or reuse .venv.
.PHONY: setup serve test

setup:
	@bash tools/setup_env.sh

# A real vLLM engine on the tiny test model plus the frontend on port 8000.
serve: setup
	@bash tools/serve_local.sh

test: setup
	.venv/bin/python -m pytest $(PYTEST_ARGS)
