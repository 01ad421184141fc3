# The two commands of the README: `make demo` and `make test`. Both do all set-up first.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
# Test processes (pytest-xdist), each with its own broker and Spark session; whole files go to
# one process (--dist loadfile), so a file's module fixtures are set up once, longest file first
# (tests/scheduling.py; --no-loadscope-reorder keeps that order). 0 runs serially.
TEST_WORKERS ?= 2

# The tests whose outcome depends on the Java (the broker, the class archive, the tasks' Java
# writer, a whole job) on another JDK: `make test-java JDK=/usr/lib/jvm/temurin-25-jdk-amd64`.
JAVA_TESTS = tests/integration/test_infra.py tests/integration/test_task_changelog.py \
             tests/integration/test_pipeline.py

.PHONY: install demo test test-java lint bench bench-engine bench-job clean

# revise/infra/cds.py names and writes the class archive: a change to it trains one again.
$(STAMP): pyproject.toml revise/infra/poms/kafka.xml revise/infra/poms/spark.xml \
          revise/infra/cds.py $(shell find revise/infra/java -name '*.java')
	@$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 14), "revise needs Python 3.11 to 3.14, got " + sys.version.split()[0]'
	@command -v java >/dev/null || { echo "Java 17, 21 or 25 is required (apt-get install openjdk-17-jdk-headless)"; exit 2; }
	@command -v javac >/dev/null || { echo "A JDK (javac) 17, 21 or 25 is required (apt-get install openjdk-17-jdk-headless)"; exit 2; }
	@command -v mvn >/dev/null || { echo "Maven is required (apt-get install maven)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) -m revise.infra.jars
	$(PY) -m revise.infra.cds
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/revise demo

PYTEST = $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	$(PYTEST)

# Only these commands get the JDK: the install ($(STAMP)) stays on the default Java's.
ON_JDK = JAVA_HOME=$(JDK) PATH=$(JDK)/bin:$$PATH

test-java: $(STAMP)
	@test -x "$(JDK)/bin/java" || { echo "make test-java needs JDK=<a JDK's folder>"; exit 2; }
	$(ON_JDK) $(PY) -m revise.infra.cds
	$(ON_JDK) $(PYTEST) $(JAVA_TESTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check revise windows sinks tests benchmarks
	$(VENV)/bin/mypy

bench-engine: $(STAMP)
	$(PY) -m benchmarks.bench_engine

bench-job: $(STAMP)
	$(PY) -m benchmarks.bench_job

clean:
	rm -rf $(VENV) .jvm
