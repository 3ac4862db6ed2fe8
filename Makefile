# gpucloud: every target sets up what it needs (a venv in .venv) on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo demo-destroy test testunit testacc lint typecheck generate bench provider-package \
        provider-packages clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## The main job: backend on embedded SQLite, provider from a local mirror, terraform apply of the quickstart.
demo: $(STAMP)
	bash scripts/demo.sh up

demo-destroy: $(STAMP)
	bash scripts/demo.sh down

## Every test, unit and acceptance, on SQLite and on a throwaway PostgreSQL, on two pytest-xdist workers
## (conftest.py keeps each file on one worker and the real-node files together; tests wait for conditions,
## never for time, so a loaded machine only makes them slower). TEST_WORKERS=0 runs one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	bash scripts/with-postgres.sh $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --durations=30

testunit: $(STAMP)
	bash scripts/with-postgres.sh $(PY) -m pytest tests

testacc: $(STAMP)
	bash scripts/with-postgres.sh $(PY) -m pytest acceptance

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy provider backend

## Rebuild generated files: gRPC stubs, proto/openapi.json, docs/.
generate: $(STAMP)
	bash scripts/generate.sh

## Self-contained provider zips in dist/provider/: this machine's platform, or every target platform.
provider-package: $(STAMP)
	bash scripts/build-provider-package.sh

provider-packages: $(STAMP)
	bash scripts/build-provider-package.sh --platform linux_amd64 --platform linux_arm64 --platform darwin_arm64

bench: $(STAMP)
	bash scripts/with-postgres.sh $(PY) -m benchmarks

clean:
	rm -rf $(VENV) .demo .bench .pytest_cache .mypy_cache .ruff_cache
