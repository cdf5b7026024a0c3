# Two commands do all set-up on a fresh machine:
#   make book   [PROFILE=workshop]   install into .venv, execute every chapter, build the HTML book
#   make book PROFILE=paper EXECUTOR=ray [RAY_ADDRESS=auto] [ACTORS=64]
#                                    the same, every episode on a Ray cluster (docs: cluster.md)
#   make test                        install into .venv, run the tests
#   make study / make study-status   start or resume the study of chapter 09 in the background / its progress
#   make ceiling-calibrate [SETTINGS=coin-L3]   the second study's dev calibration (issue 36)
#   make replay-staged CHAPTERS=11_ceiling,10_findings   replay chapters, in that order, from what is
#                                    staged (git add), in a fresh copy with empty caches, and stage what they
#                                    wrote: a study still writing records is committed with the chapters
#                                    that show them (chapter 10 collects chapter 11's claims)
#   make rerun CHAPTER=05_utility SET="n_buckets=4" [RUN=mine] [LIVE=1]
#                                    re-execute one chapter with changed parameters into runs/$(RUN)/
#   make html RUN=mine               the book with runs/mine/'s chapters in place of the profile's
#   make bench [BENCH="--profile 3"]  speed ratios; --profile: where an episode's time goes (issue 35)
#   make offline-kit DIR=/media/usb/kit   everything a participant needs, in one folder (needs network)
#   make install-offline DIR=/media/usb/kit   install from that folder with no network (workshop.md)
PROFILE ?= workshop
RUN     ?=
CHAPTER ?=
SET     ?=
EXECUTOR ?=
RAY_ADDRESS ?=
ACTORS  ?=
PYTHON  ?= python3
DIR     ?=
BENCH   ?=
SETTINGS ?=
CHAPTERS ?=
# The CPU wheel of torch, pinned: installed first so that no dependency pulls a multi-GB CUDA build.
TORCH   := torch==2.13.0
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
CLUSTER := $(VENV)/.cluster-installed
EXTRAS  := test,train

export HF_HUB_OFFLINE := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: lint offline-kit install-offline install book chapters html rerun test bench clean check-java study study-status study-stop calibrate ceiling-calibrate ceiling ceiling-status ceiling-stop check-bwrap replay-staged

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel first: otherwise a dependency pulls a multi-GB CUDA build of torch.
	$(PY) -m pip install -q "$(TORCH)"
	# the training extra too: chapter 07 trains the 0.5B policy (in the same command as the torch pin, so
	# nothing replaces the CPU wheel); `make test` adds the cluster extra here (EXTRAS below), which saves
	# a second resolve and editable build
	$(PY) -m pip install -q -c constraints.txt "$(TORCH)" -e ".[$(EXTRAS)]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP) check-bwrap

# Ray, the optional extra `cluster`: for the Ray executor and its tests (not needed to run the book on one machine)
$(CLUSTER): $(STAMP)
	$(PY) -c "import ray" 2>/dev/null || $(PY) -m pip install -q -c constraints.txt "$(TORCH)" -e ".[test,train,cluster]"
	touch $(CLUSTER)

# Code skills (model-written Python) run only inside a bubblewrap jail; without it they are refused
# (text skills still work) and the sandbox tests fail.
check-bwrap:
	@command -v bwrap >/dev/null 2>&1 || echo "warning: bubblewrap (bwrap) is not installed: code skills will refuse to run and the sandbox tests will fail. Install it, e.g. 'sudo apt-get install -y bubblewrap' (Debian/Ubuntu), 'sudo dnf install bubblewrap' (Fedora)."

check-java:
	@command -v java >/dev/null 2>&1 || { echo "error: Java (a JRE >= 11) is required by ScienceWorld and TextWorldExpress. Install it, e.g. 'sudo apt-get install -y default-jre-headless' (Debian/Ubuntu) or 'brew install openjdk' (macOS)."; exit 1; }

chapters: install check-java $(if $(filter ray,$(EXECUTOR)),$(CLUSTER))
	$(PY) -m skillbook.book execute --profile $(PROFILE) $(if $(EXECUTOR),--executor $(EXECUTOR)) \
		$(if $(RAY_ADDRESS),--ray-address $(RAY_ADDRESS)) $(if $(ACTORS),--actors $(ACTORS))

html: install
	$(PY) -m skillbook.book build --profile $(PROFILE) $(if $(RUN),--overlay $(RUN))

rerun: install check-java
	@test -n "$(CHAPTER)" || { echo "usage: make rerun CHAPTER=05_utility SET=\"n_buckets=4\" [RUN=mine] [LIVE=1]"; exit 2; }
	$(PY) -m skillbook.book rerun $(CHAPTER) --from $(PROFILE) --into $(or $(RUN),mine) \
		$(foreach s,$(SET),--set $(s)) $(if $(LIVE),--live)

book: chapters html

# the tests need Ray (tests/test_ray.py): on a fresh machine, one install with every extra
test: EXTRAS := test,train,cluster
test: install check-java $(CLUSTER) lint
	$(PY) -m pytest -q -m "not exercises" --durations=15; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# The library checks itself: ruff (E, F, I, B, UP) everywhere, mypy on llm/, run/, skills/, analysis/
# (pyproject.toml says how strictly).
lint: install
	$(PY) -m ruff check lib tests bench tools
	$(PY) -m mypy

# The workshop exercises run live in book order under the smoke profile (about an hour on 2 cores).
test-exercises: install check-java
	$(PY) -m pytest -q -m exercises tests/test_exercises.py

# make bench [BENCH="--profile 3" | BENCH="--serving speculative=ngram"]: the ratios, or one study of them
bench: install
	$(PY) bench/run.py $(BENCH)

# The study of chapter 09: hours of model time, run in the background across sittings (resumable).
study: install check-java
	$(PY) -m skillbook.papers.breakdown.study start --profile study

study-status: install
	$(PY) -m skillbook.papers.breakdown.study status --profile study

study-stop: install
	$(PY) -m skillbook.papers.breakdown.study stop --profile study

calibrate: install check-java
	$(PY) -m skillbook.papers.breakdown.study calibrate

# The second study (issue 36: none, self, oracle, placebo on distinct games): its dev calibration, then the
# registered run in the background (profiles/ceiling.yml, once registered), its progress, a clean stop.
ceiling-calibrate: install check-java
	$(PY) -m skillbook.papers.breakdown.ceiling calibrate $(if $(SETTINGS),--settings $(SETTINGS),)

ceiling: install check-java
	$(PY) -m skillbook.papers.breakdown.ceiling start --profile ceiling

ceiling-status: install
	$(PY) -m skillbook.papers.breakdown.ceiling status --profile ceiling

ceiling-stop: install
	$(PY) -m skillbook.papers.breakdown.ceiling stop --profile ceiling

# The index, not the working tree: the background study keeps appending records while this runs. What the
# replay wrote besides the notebooks (a chapter's claims record, once the records hold claims) comes back too,
# listed, so that the commit holds everything a fresh replay of it would write.
replay-staged: install
	@test -n "$(CHAPTERS)" || { echo "usage: make replay-staged CHAPTERS=11_ceiling"; exit 2; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	git checkout-index -a --prefix="$$tmp/copy/" && cp "$$(git rev-parse --git-path index)" "$$tmp/index" && \
	(cd "$$tmp/copy" && for c in $$(echo $(CHAPTERS) | tr , ' '); do \
	  SKILLBOOK_CACHE="$$tmp/cache/skillbook" XDG_CACHE_HOME="$$tmp/cache" SKILLBOOK_REPLAY_ONLY=1 \
	  PYTHONPATH="$$tmp/copy/lib" $(CURDIR)/$(PY) -m skillbook.book execute --profile $(PROFILE) \
	  --chapters $$c || exit 1; done) && \
	g="git -C $$tmp/copy --git-dir=$$(git rev-parse --absolute-git-dir) --work-tree=$$tmp/copy" && \
	{ GIT_INDEX_FILE="$$tmp/index" $$g diff --name-only; \
	  GIT_INDEX_FILE="$$tmp/index" $$g ls-files --others --exclude-standard; } > "$$tmp/written" && \
	while read -r f; do echo "replay wrote: $$f"; mkdir -p "$$(dirname "$$f")"; cp "$$tmp/copy/$$f" "$$f"; \
	  git add "$$f"; done < "$$tmp/written"

# A room without network (workshop.md): fetch once where there is network, copy DIR by USB, install from it.
offline-kit: install
	@test -n "$(DIR)" || { echo "usage: make offline-kit DIR=<a folder to copy to the participants' laptops>"; exit 2; }
	$(PY) -m skillbook.kit fetch "$(DIR)" --pin "$(TORCH)"

install-offline:
	@test -n "$(DIR)" || { echo "usage: make install-offline DIR=<the folder made by make offline-kit>"; exit 2; }
	$(PYTHON) -I lib/skillbook/kit.py check "$(DIR)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-index --find-links "$(DIR)/wheels" -c constraints.txt "$(TORCH)" -e ".[test,train,cluster]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	$(PY) -m skillbook.kit install "$(DIR)"
	touch $(STAMP) $(CLUSTER)
	@$(MAKE) --no-print-directory check-bwrap

clean:
	rm -rf _build book_assets
