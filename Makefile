# Every target installs what it needs into .venv first (idempotent; about a minute on a fresh machine).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA ?= ../shared/data

.PHONY: install demo test

$(STAMP): setup.py requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps bert4keras==0.11.5
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# The main job: a small randomly initialised BERT trained with CoSENT on STS-B for one epoch.
demo: $(STAMP)
	$(PY) scripts/cosent.py STS-B --data-dir $(DATA) --epochs 1 --lr 1e-4 --output-dir runs/demo-cosent-STS-B

test: $(STAMP)
	COSENT_SHARED_DATA=$(DATA) $(PY) -m pytest -q -p no:cacheprovider tests
