# Every target installs what it needs into .venv first (idempotent; under a minute on a fresh machine):
# the package and its dependencies for the main job, the [test] extra and torch as well for the tests.
# uv installs them (one resolver pass, wheels unpacked in parallel from its cache; docs/testing.md
# has the times against pip); it lives in an environment of its own and is given the package
# sources pip is configured with (tools/uv_options.py).
UV_VENV := .venv-uv
UV := $(UV_VENV)/bin/uv
UV_INSTALL = $(UV) pip install -q $(shell python3 tools/uv_options.py) --python
NEW_VENV = $(UV) venv -q --seed --allow-existing --python "$$(command -v python3)"
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
DATA ?= ../shared/data

# torch, transformers and sentence-transformers: the independent references of the Hugging
# Face parity tests and the contestants of `make bench`; never dependencies of the package.
REF_VENV := .venv-reference
REF_PY := $(REF_VENV)/bin/python
# sentence-transformers 5 with its ONNX backend (optimum-onnx needs transformers<4.58, which
# sentence-transformers 6 does not take): the reference that loads `export --format onnx` folders.
ONNX_REF_VENV := .venv-onnx-reference
ONNX_REF_PY := $(ONNX_REF_VENV)/bin/python

.PHONY: install install-test environments demo test test-keras3 test-full test-quick lint bench bench-avx2 profile-step soak kill-soak mutants onnx-quality bench-onnx bench-matryoshka bench-ann bench-keras3

$(UV):
	python3 -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install -q uv==0.13.9

# What the main job needs: the package with setup.py's install_requires (no torch, no test tools).
$(STAMP): setup.py | $(UV)
	$(NEW_VENV) $(VENV)
	$(UV_INSTALL) $(PY) -e .
	$(UV_INSTALL) $(PY) --no-deps bert4keras==0.11.5
	touch $(STAMP)

# What the tests and the linters need besides: the [test] extra, the [onnx], [ann] and [keras3] extras whose
# code they test, and torch so that the tests also read pytorch_model.bin (pinned: the CPU build on
# this machine's disk). One resolver pass over the pins of .ci/constraints (what the suite last passed
# with: nothing to backtrack over), then bert4keras without its metadata's pins; it makes the main
# job's environment on the way.
$(TEST_STAMP): setup.py .ci/constraints/test.txt | $(UV)
	$(NEW_VENV) $(VENV)
	$(UV_INSTALL) $(PY) -e ".[test,onnx,ann,keras3]" torch==2.13.0 -c .ci/constraints/test.txt
	$(UV_INSTALL) $(PY) --no-deps bert4keras==0.11.5
	touch $(STAMP) $(TEST_STAMP)

install: $(STAMP)

install-test: $(TEST_STAMP)

# The three environments of the tests, built side by side: each install mostly waits on the
# package index, so the three take about as long as the longest (.ci/run starts with this).
environments:
	$(MAKE) -j3 $(TEST_STAMP) $(REF_VENV)/.installed $(ONNX_REF_VENV)/.installed

# The main job: a small randomly initialised BERT trained with CoSENT on STS-B for one epoch.
demo: $(STAMP)
	$(PY) scripts/cosent.py STS-B --data-dir $(DATA) --epochs 1 --lr 1e-4 --output-dir runs/demo-cosent-STS-B --overwrite

# Every test on every core: pytest-xdist hands whole modules to its workers (module fixtures are
# built once), slowest first (tests/module_seconds.json); tests/workers.py gives each worker its
# share of the cores' threads. Each run's times go to $(TIMES), and the end prints the suite's
# total and its ten slowest modules (tools/suite_times.py; docs/testing.md has the budget).
TIMES := .cache/suite-times
WORKERS ?= auto
# CI's selection: every test but the few marked `full` (docs/testing.md lists them and what they
# cover); `make test-full` runs those as well.
MARKS ?= not full
# --no-loadscope-reorder: xdist would hand the modules out by their number of tests, most first,
# instead of in the order tests/timing.py sorts them in (slowest first).
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile --no-loadscope-reorder
# Each process of the suite reads the modules the ones before it compiled (.cache/pycache): where
# PYTHONDONTWRITEBYTECODE is set, as on these machines, every process that imported TensorFlow compiled
# its Python sources again (docs/testing.md).
BYTECODE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(abspath .cache/pycache)
TEST_ENV := $(BYTECODE) COSENT_SHARED_DATA=$(DATA) COSENT_REFERENCE_PYTHON=$(abspath $(REF_PY)) COSENT_ONNX_REFERENCE_PYTHON=$(abspath $(ONNX_REF_PY))

test: $(TEST_STAMP) $(REF_VENV)/.installed $(ONNX_REF_VENV)/.installed
	rm -rf $(TIMES) && mkdir -p $(TIMES)
	$(TEST_ENV) $(PYTEST) -m "$(MARKS)" --durations=20 --timing-json $(TIMES)/keras2.json tests
	$(MAKE) test-keras3
	$(PY) tools/suite_times.py $(TIMES)/*.json

# The Keras 3 suite, in processes of its own, on the TensorFlow and the JAX backends side by side,
# each in one process on half the cores (one process start each, and no worker idles at the end of
# a run); JAX takes the modules fastest first, so that each Keras 2 reference is computed once, by
# whichever run comes to it first, while the other works on something else. Each run's output is
# printed when it ends.
KERAS3_CORES := $(shell python3 -c "import os; print(max(1, (os.cpu_count() or 2) // 2))")
test-keras3: $(TEST_STAMP) $(REF_VENV)/.installed
	mkdir -p $(TIMES)
	$(MAKE) -j2 --output-sync=target keras3-tensorflow keras3-jax

.PHONY: keras3-tensorflow keras3-jax
keras3-tensorflow keras3-jax: keras3-%:
	KERAS_BACKEND=$* COSENT_TEST_CORES=$(KERAS3_CORES) $(TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider -n 0 -m "$(MARKS)" $(if $(filter jax,$*),--fastest-modules-first) --confcutdir=tests/keras3 --durations=10 --timing-json $(TIMES)/keras3-$*.json tests/keras3

# Every test, those left out of CI for their cost included.
test-full:
	$(MAKE) test MARKS=""

# The fast tests on every core: neither the slow ones (subprocesses, signals, serving; a bare
# `pytest` leaves those out too) nor the heavy ones (more than about 2.5 s each in-process).
test-quick: $(TEST_STAMP)
	$(BYTECODE) COSENT_SHARED_DATA=$(DATA) $(PYTEST) -m "not slow and not heavy" tests

# Lint, format check and type check (settings in pyproject.toml); `ruff format .` applies the
# format. .pre-commit-config.yaml runs the same three before each commit.
lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

$(REF_VENV)/.installed: .ci/constraints/reference.txt | $(UV)
	$(NEW_VENV) $(REF_VENV)
	$(UV_INSTALL) $(REF_PY) torch==2.13.0 sentence-transformers==6.2.0 -c .ci/constraints/reference.txt
	touch $@

$(ONNX_REF_VENV)/.installed: .ci/constraints/onnx-reference.txt | $(UV)
	$(NEW_VENV) $(ONNX_REF_VENV)
	$(UV_INSTALL) $(ONNX_REF_PY) torch==2.13.0 "sentence-transformers[onnx]>=5,<6" -c .ci/constraints/onnx-reference.txt
	touch $@

# Speed against the original pipeline and sentence-transformers (about 35 minutes; writes
# benchmarks/RESULTS.md); the contestants run in $(REF_VENV).
bench: $(STAMP) $(REF_VENV)/.installed $(ONNX_REF_VENV)/.installed
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/run.py --bench-python $(REF_PY)
	$(MAKE) bench-onnx
	$(MAKE) bench-matryoshka
	$(MAKE) bench-ann
	$(MAKE) bench-keras3

# The ONNX export's encode speed against this engine, plain ONNX Runtime and sentence-transformers
# (about 15 minutes on a quiet 2-core machine; writes benchmarks/ONNX.md and onnx_results.json).
bench-onnx: $(TEST_STAMP) $(REF_VENV)/.installed $(ONNX_REF_VENV)/.installed
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/onnx_bench.py --bench-python $(REF_PY) --onnx-reference-python $(ONNX_REF_PY)

# Training and encoding speed of the small model on Keras 3, TensorFlow and JAX backends, against the
# Keras 2 engine, each contestant and job in a process of its own (one Keras per process; 12 minutes
# on the 2-core machine beside other jobs; writes benchmarks/KERAS3.md, keras3_results.json and keras3.png).
bench-keras3: $(TEST_STAMP)
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/keras3_bench.py

# Spearman and Recall@10 by vector width of a plain model cut, a PCA of its vectors and a Matryoshka
# model cut, small and BERT-base-width models trained on STS-B (36 + 19 minutes on the 2-core machine
# beside other jobs; writes benchmarks/MATRYOSHKA.md, matryoshka_results.json and matryoshka.png; the
# models stay in runs/matryoshka-bench).
bench-matryoshka: $(STAMP)
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/matryoshka_bench.py

# The index's precisions and kinds on a million vectors (BQ encoded at 128 by bench-matryoshka's
# small Matryoshka model, padded with random ones): recall@10, build time, memory, queries/s, and
# where exact search stops being fast enough (45 minutes on the 2-core machine beside other jobs; writes
# benchmarks/ANN.md, ann_results.json and ann.png; its steps are kept in runs/ann-bench, so a rerun goes
# on where one stopped).
bench-ann: $(TEST_STAMP)
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/ann_bench.py

# The float32 jobs of both models with every contestant's kernels capped at AVX2, as on the
# AVX2-only CPUs (about 12 minutes; writes benchmarks/AVX2_EMULATION.md).
bench-avx2: $(STAMP) $(REF_VENV)/.installed
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/avx2_emulation.py --bench-python $(REF_PY)

# Where a training step's time goes, by op type and by inter-op thread, float32 against bf16,
# and how much the cores beyond the first speed it up (about 8 minutes; writes
# benchmarks/STEP_PROFILE_{small,base}.md and CORE_SCALING_{small,base}.md).
profile-step: $(STAMP)
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/step_profile.py --model small
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/step_profile.py --model base
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/core_scaling.py --model small
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/core_scaling.py --model base --steps 6 --rounds 1 --repeats 1

# Many short trainings in parallel processes, counting failures (not part of CI; about
# 4 minutes per 200 runs here). SOAK_ARGS="--variant before-fix --variant default" compares
# the engine with and without its oneDNN primitive-cache setting; see benchmarks/soak.py.
SOAK_ARGS ?= --runs 200
soak: $(STAMP)
	$(PY) benchmarks/soak.py $(SOAK_ARGS)

# Training runs SIGKILLed at random moments and rerun until they finish, against an uninterrupted
# one (not part of CI; about 10 minutes): writes benchmarks/KILL_SOAK.md and kill_soak.json.
KILL_SOAK_ARGS ?= --trials 8
kill-soak: $(STAMP)
	$(PY) benchmarks/kill_soak.py $(KILL_SOAK_ARGS)

# int8 against float32 on the small reproduction's models (about 35 minutes): exports each of
# runs/small's models with --quantize int8 --check on its task's test file; writes
# docs/small-random/onnx-int8.md.
onnx-quality: $(TEST_STAMP)
	COSENT_SHARED_DATA=$(DATA) $(PY) benchmarks/onnx_quality.py

# Planted bugs that the fast tests must catch (not part of CI; about 10 minutes): writes
# tools/mutants.json. MUTANTS_ARGS="--only scale" runs a subset.
MUTANTS_ARGS ?=
mutants: $(TEST_STAMP)
	COSENT_SHARED_DATA=$(DATA) $(PY) tools/mutants.py $(MUTANTS_ARGS)
