# korch — hand-written Makefile.  `make` builds build/korch.
#   make check    fast (< 2 min): -Werror build, the unit tests (no kernel, docker or browser), check-layers
#   make test     scripts/setup.sh, the kernel image, then every test (real ipykernel, real dockerd)
#   make image    the docker kernel image (scripts/build-image.sh)
#   make demo     the main job end to end (scripts/demo.sh)
#   make asan     the same tests built with ASan+UBSan
#   make fuzz     the libFuzzer targets of tests/fuzz/ (clang, ASan+UBSan) into build-fuzz/fuzz/
#   make bench    benchmarks against the reference Python stack
#   make jupyterlab-wheel  the JupyterLab extension: dist/korch_jupyterlab-VERSION-py3-none-any.whl
#   make install  PREFIX=/usr/local

PREFIX  ?= /usr/local
BUILD   ?= build
CC      ?= cc
PKGS    := libzmq libczmq jansson libcurl openssl libwebsockets libuv libseccomp
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
OPT     ?= -O2 -g
VERSION := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS  += -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -MMD -MP -Iinclude $(PKG_CFLAGS) $(SAN) \
           -DKORCH_VERSION='"$(VERSION)"' -DKORCH_PREFIX='"$(PREFIX)"'
LDLIBS  += $(PKG_LIBS) -lm -lpthread
LDFLAGS += $(SAN)

# -Wformat-truncation is on: a path cut at a fixed buffer's end names another
# file (build paths with korch_path_join / korch_path_fmt, korch/path.h).

LIB_SRC  := $(filter-out src/cli/%,$(wildcard src/*/*.c src/*/*/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/src/server/web_assets.o $(BUILD)/src/launcher/forksrv_py.o
CLI_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/cli/*.c))
TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/bench/*.c))
DEPS     := $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d)

ifeq ($(V),1)
Q :=
else
Q := @
endif

.PHONY: soak-team all check test asan jupyterlab jupyterlab-wheel bench install clean setup image check-banned demo fuzz fuzz-targets fuzz-long

all: $(BUILD)/korch $(BUILD)/korch-test $(if $(BENCH_OBJ),$(BUILD)/korch-bench)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# The web app (src/web): TypeScript bundled by esbuild into $(BUILD)/web/
# (scripts/build-web.sh: npm ci when needed, then src/web/build.mjs), then
# embedded in the binary by web_assets.S.
WEB_IN  := $(wildcard src/web/src/*) src/web/index.html src/web/build.mjs src/web/package-lock.json \
           src/web/tsconfig.json scripts/build-web.sh
WEB_OUT := $(BUILD)/web/index.html $(BUILD)/web/korch.js $(BUILD)/web/korch.css

$(WEB_OUT) &: $(WEB_IN)
	@$(if $(Q),echo "  WEB     $(BUILD)/web")
	$(Q)scripts/build-web.sh $(BUILD)/web

$(BUILD)/src/server/web_assets.o: src/server/web_assets.S $(WEB_OUT)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AS      $<")
	$(Q)$(CC) $(CFLAGS) -I$(BUILD)/web -c $< -o $@

# The kernel template's program (src/launcher/forksrv.py), embedded likewise.
$(BUILD)/src/launcher/forksrv_py.o: src/launcher/forksrv_py.S src/launcher/forksrv.py
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AS      $<")
	$(Q)$(CC) $(CFLAGS) -Isrc/launcher -c $< -o $@

# ar keeps members by basename: two objects of one name in different dirs
# (docker/start.o, swarm/start.o) are both kept because the archive is made
# afresh each time (rm -f first), never updated in place.
$(BUILD)/libkorch.a: $(LIB_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/korch: $(CLI_OBJ) $(BUILD)/libkorch.a | check-banned
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/korch-test: $(TEST_OBJ) $(BUILD)/libkorch.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/korch-bench: $(BENCH_OBJ) $(BUILD)/libkorch.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# git's banned.h, as a check: these calls overflow or are not thread-safe.
BANNED := strcpy|strcat|sprintf|vsprintf|strtok|gmtime|localtime|ctime|asctime|gets|strncpy|atoi
check-banned:
	@if grep -nE '\<($(BANNED))\(' src/*/*.c src/*/*/*.c include/korch/*.h; then \
	  echo "error: banned function used (see the Makefile's BANNED list)"; exit 1; fi

setup:
	@scripts/setup.sh

# The kernel image for the docker launcher; starts dockerd when none answers,
# skipped when an image from the same Dockerfile exists.
image:
	@scripts/build-image.sh

# JupyterLab 4 (Debian trixie in a chroot, cached) for the JupyterLab tests.
jupyterlab:
	@scripts/jupyterlab-chroot.sh

# korch's JupyterLab 4 extension as a wheel (src/jupyterlab/korch_jlab_build.py:
# npm ci of src/jupyterlab/package-lock.json, tsc, @jupyterlab/builder; Node and
# Python 3.11's standard library, no JupyterLab, no PyPI). Not in `all`: the
# first npm ci fetches ~400 MB of node_modules and webpack takes ~15 s.
JLAB_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' src/jupyterlab/pyproject.toml)
JLAB_WHEEL   := dist/korch_jupyterlab-$(JLAB_VERSION)-py3-none-any.whl
JLAB_IN      := $(wildcard src/jupyterlab/src/*.ts src/jupyterlab/style/* src/jupyterlab/korch_jupyterlab/*.py \
                  src/jupyterlab/jupyter-config/*/*) src/jupyterlab/package.json src/jupyterlab/package-lock.json \
                src/jupyterlab/tsconfig.json src/jupyterlab/pyproject.toml src/jupyterlab/korch_jlab_build.py \
                $(filter-out scripts/build-web.sh,$(WEB_IN))

jupyterlab-wheel: $(JLAB_WHEEL)

# A clean checkout (CI) has no dist/: the wheel built from the same sources
# before is taken from JLAB_CACHE (keyed by the sha256 of every input, names
# included) instead of an npm ci and a webpack build (about 1.5 min here).
JLAB_CACHE ?= /var/cache/korch/jlab-wheel
$(JLAB_WHEEL): $(JLAB_IN)
	$(Q)key=$$(sha256sum $(sort $(JLAB_IN)) | sha256sum | cut -c1-16); \
	if [ -f "$(JLAB_CACHE)/$$key/$(notdir $@)" ]; then \
	  $(if $(Q),echo "  WHEEL   $@ (cached: $(JLAB_CACHE)/$$key)";) \
	  mkdir -p $(dir $@) && cp "$(JLAB_CACHE)/$$key/$(notdir $@)" $@.tmp && mv $@.tmp $@; \
	else \
	  $(if $(Q),echo "  WHEEL   $@";) \
	  python3 src/jupyterlab/korch_jlab_build.py dist && \
	  { mkdir -p "$(JLAB_CACHE)/$$key" && cp $@ "$(JLAB_CACHE)/$$key/$(notdir $@).tmp" && \
	    mv "$(JLAB_CACHE)/$$key/$(notdir $@).tmp" "$(JLAB_CACHE)/$$key/$(notdir $@)" || \
	    echo "  (not cached: cannot write $(JLAB_CACHE))"; }; \
	fi

# The fast check beside `make test`: the build (WARN has -Werror), the unit
# tests (files that define KORCH_TEST_UNIT: no kernel, docker or browser) and
# the layering check (scripts/check-layers.sh: no file calls another that
# calls it back, but for scripts/layers-allow.txt; no call up the order of
# scripts/layers.txt; no source file over 800 lines, but for the shrinking
# list of scripts/size-allow.txt).
check:
	@$(MAKE) --no-print-directory all
	@KORCH_RUNTIME_DIR=$${KORCH_RUNTIME_DIR:-/tmp/korch-check-$$(id -u)} scripts/test.sh $(BUILD) --unit
	@scripts/check-layers.sh $(BUILD)

# make test builds both trees on every core (.ci/run calls plain `make test`);
# the tests run TEST_JOBS at a time, the solo ones (docker, swarm, browsers,
# host-wide counts, time bounds) alone at the end (docs/testing.md).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_JOBS ?= 2
test: setup image jupyterlab jupyterlab-wheel
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@$(MAKE) --no-print-directory -j$(JOBS) fuzz
	@scripts/test.sh $(BUILD) -j$(TEST_JOBS)

asan:
	@scripts/setup.sh
	@scripts/build-image.sh
	@scripts/jupyterlab-chroot.sh
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" all
	@$(MAKE) --no-print-directory fuzz
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1 scripts/test.sh build-asan

# All benchmarks, each printing its ratios against the reference measured in
# the same run: korch vs jupyter_client, containers vs local, the agent's cost,
# korch serve vs jupyter_server, the sandbox vs local and docker, MCP vs the websocket.
bench: setup image
	@$(MAKE) --no-print-directory all
	@scripts/bench.sh $(BUILD)
	@scripts/bench-containers.sh $(BUILD)
	@scripts/bench-sandbox.sh $(BUILD)
	@scripts/bench-agent.sh $(BUILD)
	@scripts/bench-server.sh $(BUILD)
	@scripts/bench-mcp.sh $(BUILD)
	@scripts/bench-loop.sh $(BUILD)
	@scripts/bench-fastkernel.sh $(BUILD)

# The team soak (issue 26): 20 users x 3 agent sessions running turns for 5
# minutes against one korch serve --users (not in make test; SOAK_* knobs).
soak-team:
	@$(MAKE) --no-print-directory all
	@scripts/soak-team.sh $(BUILD)

install: $(BUILD)/korch
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/korch/kernelspec
	install -m 0755 $(BUILD)/korch $(DESTDIR)$(PREFIX)/bin/korch
	cp -r kernelspec/. $(DESTDIR)$(PREFIX)/share/korch/kernelspec/

# libFuzzer targets: one per tests/fuzz/NAME.c, seeds in tests/fuzz/corpus/NAME/.
# libkorch is built by clang with fuzzer coverage, ASan and UBSan (UBSan
# aborts) into its own dir; tests/test_fuzz.c runs each for a bounded time.
# No -Werror here: gcc's build enforces the warnings, clang's set differs.
FUZZ_BUILD := build-fuzz
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/*.c))

fuzz:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT="-O1 -g -fno-omit-frame-pointer" \
	  WARN="$(filter-out -Werror,$(WARN)) -Wno-unknown-warning-option" \
	  SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" fuzz-targets

fuzz-targets: $(FUZZ_BINS)

# The deeper search beside make test's short budgets (tests/test_fuzz.c):
# FUZZ_SECONDS per target on the same seed corpus, `make fuzz-long FUZZ_SECONDS=3600`.
FUZZ_SECONDS ?= 300
fuzz-long: fuzz
	@KORCH_FUZZ_SECONDS=$(FUZZ_SECONDS) KORCH_RUNTIME_DIR=$${KORCH_RUNTIME_DIR:-/tmp/korch-fuzz-$$(id -u)} \
	  scripts/test.sh $(BUILD) fuzz_

$(FUZZ_BINS): $(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/libkorch.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)$(CC) $(CFLAGS) -Isrc/server -fsanitize=fuzzer -o $@ $< $(BUILD)/libkorch.a $(LDFLAGS) $(LDLIBS)

clean:
	rm -rf build build-asan $(FUZZ_BUILD) dist

-include $(DEPS) $(FUZZ_BINS:=.d)

demo:
	@scripts/demo.sh
