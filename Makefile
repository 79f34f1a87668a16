# One hand-written GNU Makefile for the whole pipeline.
#
#   make            install missing Debian packages (make deps), build everything
#   make test       build, then run every Check suite, the end-to-end tests and each fuzz
#                   harness for 30 s
#   make asan       the Check suites again under AddressSanitizer + UBSan
#   make tsan       the thread pool's suite under ThreadSanitizer
#   make fuzz       every libFuzzer harness of tests/fuzz for FUZZ_SECONDS (default 120)
#   make run        start the pipeline on $(MODEL) and stream a story through llmc
#   make bench      the benchmarks under bench/ (slow: they synthesise a 1.1B model)
#   make soak       10 minutes of load (60_soak) and 10 of chaos (90_chaos: kill -9 of
#                   random daemons under 8 streams); make test runs short forms of both
#   make install    binaries, llm-pipeline, systemd units, /etc/llm/llm.env, man pages
#                   (PREFIX=/usr/local, DESTDIR, BINDIR, MANDIR, SYSCONFDIR, UNITDIR);
#                   make uninstall removes them again
#   make deb        a Debian package built from the tree (deploy/deb.sh), in $(BUILD)/deb/
#   make test-deploy  the package, the units and the Containerfile's image run for real
#                   in podman containers (tests/deploy/run.sh; a SKIP where podman cannot)
#   make test-arm   the kernel and qn suites cross-built for aarch64 and run under
#                   qemu-aarch64 on CPUs with dotprod and i8mm, dotprod only, and neither
#                   (part of make test); make test-arm-forward: the forward suite so (minutes)
#
# BUILD=dir puts every object and binary under dir (default build/), so several
# builds (asan, debug, a helper's scratch build) can coexist in one tree.

BUILD   ?= build
MODEL   ?= ../shared/models/stories260K-f32.gguf
SHARED  ?= ../shared
CC      ?= cc
PKGS    := libzmq3-dev libmsgpack-dev check pkg-config python3 clang libclang-rt-14-dev runit \
           libmicrohttpd-dev libjansson-dev curl scdoc gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
PC_LIBS := libzmq msgpack
GW_LIBS := libmicrohttpd jansson   # llmc serve (the HTTP gateway) and its tests only

CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter -Wvla -Wshadow
OPT      ?= -O2 -g
CFLAGS   += $(CSTD) $(WARN) $(OPT) -pthread -MMD -MP
PC_CFLAGS = $(shell pkg-config --cflags $(PC_LIBS) $(GW_LIBS) 2>/dev/null)
GW_LDLIBS = $(shell pkg-config --libs $(GW_LIBS) 2>/dev/null)
PC_LDLIBS = $(shell pkg-config --libs $(PC_LIBS) 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
LDLIBS   += $(PC_LDLIBS) -lrt -lm -pthread

# Layers (docs/ARCHITECTURE.md): a folder's objects see only the folders it may use.
# A program (engined, tokenizerd, samplerd, client) sees common/, the libraries it uses
# and its own folder, never another program's, so an include across programs does not
# compile; what two programs share moves to common/ or to a library folder (tok/).
# The tests, the benchmarks and the fuzz harnesses test everything and see everything.
INC_common     := -Icommon
INC_tok        := -Icommon -Itok
INC_grammar    := -Icommon -Igrammar
INC_engined    := -Icommon -Iengined
INC_tokenizerd := -Icommon -Itok -Igrammar -Itokenizerd
INC_samplerd   := -Icommon -Itok -Igrammar -Isamplerd
INC_client     := -Icommon -Itok -Igrammar -Iclient
INC_ALL        := -Icommon -Itok -Igrammar -Iengined -Itokenizerd -Isamplerd -Iclient
INC_tests      := $(INC_ALL)
INC_bench      := $(INC_ALL)
# The include flags of a source file, by its top folder.
inc = $(or $(INC_$(firstword $(subst /, ,$(1)))),$(error no include path for $(1): add INC_$(firstword $(subst /, ,$(1)))))

# Library sources: every .c of a part except its main.c.
COMMON_SRC := $(wildcard common/*.c)
TOK_SRC    := $(wildcard tok/*.c)
GRAM_SRC   := $(wildcard grammar/*.c)
ENGINE_SRC := $(filter-out engined/main.c,$(wildcard engined/*.c))
FRONT_SRC  := $(filter-out tokenizerd/main.c,$(wildcard tokenizerd/*.c))
SAMP_SRC   := $(filter-out samplerd/main.c,$(wildcard samplerd/*.c))
CLIENT_SRC := $(wildcard client/*.c)
TEST_SRC   := $(wildcard tests/check_*.c)
BENCH_SRC  := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
# Every archive, for the tests, benchmarks and fuzz harnesses; each program links fewer.
LIBS := $(BUILD)/libengine.a $(BUILD)/libfront.a $(BUILD)/libsampler.a $(BUILD)/libgrammar.a $(BUILD)/libtok.a \
        $(BUILD)/libcommon.a
BINS := $(BUILD)/bin/llmc $(patsubst %/main.c,$(BUILD)/bin/%,$(wildcard engined/main.c tokenizerd/main.c samplerd/main.c))
LINK_LIBS = -Wl,--start-group $(LIBS) -Wl,--end-group
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all deps build test test-beside unit check-layers e2e asan tsan fuzz fuzz-build fuzz-run fuzz-bins test-checks run stop bench soak clean \
        man install uninstall deb test-deploy test-arm test-arm-forward
.DEFAULT_GOAL := all

# The build steps run as many compiles at once as there are cores (JOBS=1 for one).
JOBS ?= $(shell nproc)
# -j for a sub-make: JOBS of its own, or none under a calling make's jobserver (whose
# slots it then shares; a -j there would reset it, "-jN forced in submake")
SUB_J = $(if $(findstring jobserver,$(MAKEFLAGS)),,-j$(JOBS))

all: deps
	@$(MAKE) --no-print-directory $(SUB_J) build

build: $(BINS) $(BUILD)/tests/check_all $(BENCHES)

# Installs only what is missing; needs root or sudo the first time.
deps:
	@missing=""; for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi; \
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "make deps: installing nodejs npm (the HTTP gateway's tests run the openai npm package)"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; \
	fi

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call inc,$<) $(PC_CFLAGS) -c $< -o $@

$(BUILD)/libcommon.a: $(call obj,$(COMMON_SRC))
$(BUILD)/libtok.a: $(call obj,$(TOK_SRC))
# the grammar engine and the JSON Schema converter (structured output: samplerd masks,
# the front door and llmc compile and refuse)
$(BUILD)/libgrammar.a: $(call obj,$(GRAM_SRC))
$(BUILD)/libengine.a: $(call obj,$(ENGINE_SRC))
# the front door's modules (tokenizerd without its main), for the Check suites
$(BUILD)/libfront.a: $(call obj,$(FRONT_SRC))
$(BUILD)/libsampler.a: $(call obj,$(SAMP_SRC))
# llmc's modules as an archive too, so that the Check suites can test them
$(BUILD)/libclient.a: $(call obj,$(filter-out client/main.c,$(CLIENT_SRC)))
$(BUILD)/lib%.a:
	@mkdir -p $(dir $@)
	@rm -f $@
	$(AR) rcs $@ $^ $(if $^,,$(BUILD)/empty.o)

$(BUILD)/empty.o:
	@mkdir -p $(dir $@)
	echo 'typedef int empty_unit;' | $(CC) -x c -c - -o $@
$(LIBS): | $(BUILD)/empty.o

# Each program links its own objects and only the archives of the layers below it.
# A daemon links its own part's objects directly (not through its archive), so that
# entry points it reaches only through weak symbols (engd_serve, tokd_serve) are in.
$(BUILD)/bin/engined:    $(call obj,engined/main.c $(ENGINE_SRC)) $(BUILD)/libcommon.a
$(BUILD)/bin/tokenizerd: $(call obj,tokenizerd/main.c $(FRONT_SRC)) $(BUILD)/libgrammar.a $(BUILD)/libtok.a $(BUILD)/libcommon.a
$(BUILD)/bin/samplerd:   $(call obj,samplerd/main.c $(SAMP_SRC)) $(BUILD)/libgrammar.a $(BUILD)/libtok.a $(BUILD)/libcommon.a
$(BUILD)/bin/llmc:       $(call obj,$(CLIENT_SRC)) $(BUILD)/libgrammar.a $(BUILD)/libtok.a $(BUILD)/libcommon.a
$(BUILD)/bin/engined $(BUILD)/bin/tokenizerd $(BUILD)/bin/samplerd:
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(filter %.a,$^) -Wl,--end-group $(LDLIBS)
$(BUILD)/bin/llmc:
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(filter %.a,$^) -Wl,--end-group $(LDLIBS) $(GW_LDLIBS)

# The Check runner: every tests/check_NAME.c defines Suite *NAME_suite(void);
# the list of suites is generated, so adding a file adds a suite.
$(BUILD)/tests/suites.inc: $(TEST_SRC) Makefile
	@mkdir -p $(dir $@)
	@for f in $(TEST_SRC); do n=$$(basename $$f .c); echo "SUITE($${n#check_})"; done > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/obj/tests/runner.o: tests/runner.c $(BUILD)/tests/suites.inc
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INC_ALL) $(PC_CFLAGS) -I$(BUILD)/tests -c $< -o $@
$(BUILD)/tests/check_all: $(BUILD)/obj/tests/runner.o $(call obj,$(TEST_SRC)) $(LIBS) $(BUILD)/libclient.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) -Wl,--start-group $(BUILD)/libclient.a $(LIBS) -Wl,--end-group \
	  $(LDLIBS) $(GW_LDLIBS) $(CHECK_LIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LINK_LIBS) $(LDLIBS) $(GW_LDLIBS)

# The HTTP gateway's end-to-end test drives it with the official openai npm package and
# validates structured output with ajv (a JSON Schema validator), both installed from the
# npm registry into the build directory (never committed).
OPENAI_NPM := openai@6.49.0
AJV_NPM := ajv@8.20.0 ajv-formats@3.0.1
$(BUILD)/node/node_modules/openai/package.json:
	@mkdir -p $(BUILD)/node
	cd $(BUILD)/node && npm install --no-audit --no-fund --loglevel=error --prefix . $(OPENAI_NPM) $(AJV_NPM)
$(BUILD)/node/node_modules/ajv/package.json: $(BUILD)/node/node_modules/openai/package.json
	@[ -f $@ ] && [ -f $(BUILD)/node/node_modules/ajv-formats/package.json ] || (cd $(BUILD)/node && npm install --no-audit --no-fund --loglevel=error --prefix . $(OPENAI_NPM) $(AJV_NPM))

# Tests find the binaries and the shared data through the environment.
TEST_ENV = CK_DEFAULT_TIMEOUT=$${CK_DEFAULT_TIMEOUT:-60} LLM_BIN=$(abspath $(BUILD)/bin) LLM_SHARED=$(abspath $(SHARED)) LLM_BUILD=$(abspath $(BUILD))

# make test: the unit suites and then the e2e scripts (the soak for SOAK_SECONDS, 30 s
# here; `make soak` runs the 10-minute soak and chaos), and beside them (the e2e scripts
# mostly wait on their daemons) the fuzz harnesses' build, the aarch64 suites under qemu
# (test-arm) and every harness for FUZZ_SECONDS (10 s each here; `make fuzz` runs them
# longer).
test: deps
	@$(MAKE) --no-print-directory $(SUB_J) build
	@$(MAKE) --no-print-directory -j2 test-checks test-beside FUZZ_SECONDS=$${FUZZ_SECONDS:-10}
test-beside:
	@$(MAKE) --no-print-directory fuzz-build
	@$(MAKE) --no-print-directory test-arm
	@$(MAKE) --no-print-directory fuzz-run

test-checks:
	@$(MAKE) --no-print-directory unit
	@SOAK_SECONDS=$${SOAK_SECONDS:-30} $(MAKE) --no-print-directory e2e

# The unit suites, each its own check_all process (CK_RUN_SUITE), JOBS at a time (or
# as many as the calling make's job slots allow), the longest first so that the last
# ones to run are short; a suite's output is kept in $(BUILD)/tests/unit-SUITE.log and
# shown whole when it fails.
UNIT_LONG   := grammar tok forward kernels qn quant kvq8
UNIT_SUITES := $(UNIT_LONG) $(filter-out $(UNIT_LONG),$(patsubst tests/check_%.c,%,$(TEST_SRC)))
unit: check-layers
	@$(MAKE) --no-print-directory $(SUB_J) \
	  $(addprefix unit-suite-,$(UNIT_SUITES))
	@echo "unit: $(words $(UNIT_SUITES)) suites passed"
unit-suite-%:
	@log=$(BUILD)/tests/unit-$*.log; start=$$(date +%s); \
	if CK_RUN_SUITE=$* $(TEST_ENV) $(BUILD)/tests/check_all >$$log 2>&1; then \
	  echo "unit: $* $$(tail -n 1 $$log) ($$(( $$(date +%s) - start )) s)"; \
	else cat $$log; echo "unit: suite $* FAILED (log: $$log)"; exit 1; fi

# The layers by text as well as by -I (a path such as "../engined/x.h" gets past -I):
# every quoted #include of a layered folder must name, without a '/', a header of a
# folder on that folder's include path (INC_<folder> above).
LAYERED := common tok grammar engined tokenizerd samplerd client
# The front door's files in layers, bottom first (front.h): a file may call only
# functions defined in the files before it or in itself, so there is no call cycle.
# Checked on the objects (nm: what each defines, T, and calls across files, U), so
# comments and macros cannot fool it; a new front*.c must take its place in the list.
# Its functions fit on a screen: none over FRONT_MAX_FN lines.
FRONT_LAYERS := front_out front_req front_sched front_adopt front_admit frontd
FRONT_MAX_FN := 100
FRONT_OBJ = $(patsubst %,$(BUILD)/obj/tokenizerd/%.o,$(FRONT_LAYERS))
check-layers: $(FRONT_OBJ)
	@bad=0; $(foreach d,$(LAYERED),\
	  for f in $(wildcard $(d)/*.c $(d)/*.h); do \
	    for h in $$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' $$f); do \
	      ok=0; for i in $(patsubst -I%,%,$(INC_$(d))); do [ -f "$$i/$$h" ] && ok=1; done; \
	      [ "$${h#*/}" = "$$h" ] || ok=0; \
	      [ $$ok = 1 ] || { echo "$$f: #include \"$$h\" is not in $(patsubst -I%,%/,$(INC_$(d)))"; bad=1; }; \
	    done; \
	  done;) \
	[ $$bad = 0 ] && echo "check-layers: no include crosses a layer" || { echo "check-layers: FAILED (docs/ARCHITECTURE.md, Layers)"; exit 1; }
	@bad=0; for f in $(wildcard tokenizerd/front*.c); do \
	  case " $(FRONT_LAYERS) " in *" $$(basename $$f .c) "*) ;; \
	  *) echo "$$f is in no layer of the front door (FRONT_LAYERS in the Makefile)"; bad=1;; esac; \
	done; \
	nm -A $(FRONT_OBJ) | awk -v order="$(FRONT_LAYERS)" ' \
	  BEGIN { n = split(order, o, " "); for (i = 1; i <= n; i++) rank[o[i]] = i } \
	  { f = $$1; sub(/\.o:.*/, "", f); sub(/.*\//, "", f) } \
	  $$2 == "T" { def[$$3] = f } \
	  $$2 == "U" { use[++u] = f " " $$3 } \
	  END { for (i = 1; i <= u; i++) { split(use[i], x, " "); d = def[x[2]]; \
	          if (d != "" && rank[d] > rank[x[1]]) { \
	            print "tokenizerd/" x[1] ".c calls " x[2] " of tokenizerd/" d ".c, a layer above it"; bad = 1 } } \
	        exit bad }' || bad=1; \
	for f in $(patsubst %,tokenizerd/%.c,$(FRONT_LAYERS)); do \
	  awk -v max=$(FRONT_MAX_FN) -v file=$$f '/^[{]/ { s = NR } \
	    /^[}]/ && s { if (NR - s - 1 > max) { print file ":" s ": a function of " NR - s - 1 " lines (over " max ")"; bad = 1 } s = 0 } \
	    END { exit bad }' $$f || bad=1; \
	done; \
	[ $$bad = 0 ] && echo "check-layers: the front door calls only down its layers ($(FRONT_LAYERS))" || { echo "check-layers: FAILED (tokenizerd/front.h, the layers)"; exit 1; }

e2e: $(BUILD)/node/node_modules/openai/package.json $(BUILD)/node/node_modules/ajv/package.json
	@set -e; for t in $(sort $(wildcard tests/e2e/*.sh)); do \
	  echo "== $$t"; s=$$(date +%s); $(TEST_ENV) bash $$t; echo "   ($$t: $$(( $$(date +%s) - s )) s)"; done

asan: deps
	@$(MAKE) --no-print-directory $(SUB_J) BUILD=build-asan CC=clang \
	  OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
	  build
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 CK_TIMEOUT_MULTIPLIER=5 \
	  $(MAKE) --no-print-directory BUILD=build-asan unit

# ThreadSanitizer over the futex thread pool and everything else that has threads in
# the unit suites (the pool, the worker's I/O thread's ZAP peer): TSAN_SUITES.
TSAN_SUITES ?= pool
tsan: deps
	@$(MAKE) --no-print-directory $(SUB_J) BUILD=build-tsan CC=clang \
	  OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=thread" \
	  build-tsan/tests/check_all
	@set -e; for s in $(TSAN_SUITES); do \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" CK_RUN_SUITE=$$s CK_TIMEOUT_MULTIPLIER=10 \
	  $(TEST_ENV) build-tsan/tests/check_all; done

# libFuzzer harnesses (tests/fuzz/fuzz_*.c) over the parsers that take bytes from
# outside: GGUF + vocabulary, proto_decode, tok_encode on the real vocabularies, the chat
# templates, the sampler parameters, GBNF grammars and JSON schemas. Seeds are written from ../shared by fuzz_seeds into
# build-fuzz/seeds/; what a run finds stays in build-fuzz/corpus/ for the next. Each
# harness runs FUZZ_SECONDS (make test: 10 s each, two at a time); a crash fails the
# target and leaves its input in build-fuzz/ (replay: build-fuzz/fuzz/fuzz_X FILE).
FUZZ_SECONDS ?= 120
FUZZ_BUILD   := build-fuzz
# what the harnesses link: no harness touches the engine, whose kernels are most of an
# instrumented build's time
FUZZ_LIBS    := libcommon.a libtok.a libgrammar.a libsampler.a libfront.a libclient.a
FUZZ_OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
FUZZERS      := $(patsubst tests/fuzz/%.c,%,$(filter-out tests/fuzz/fuzz_seeds.c,$(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_MAXLEN_fuzz_vocab := 65536
fuzz: deps
	@$(MAKE) --no-print-directory fuzz-build
	@$(MAKE) --no-print-directory fuzz-run
fuzz-build:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT="$(FUZZ_OPT)" \
	  $(addprefix $(FUZZ_BUILD)/,$(FUZZ_LIBS))
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT="$(FUZZ_OPT)" fuzz-bins
fuzz-run:
	@rm -rf $(FUZZ_BUILD)/seeds
	$(FUZZ_BUILD)/fuzz/fuzz_seeds $(abspath $(SHARED)) $(FUZZ_BUILD)/seeds
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) $(addprefix fuzz-run-,$(FUZZERS))
	@grep -h "^fuzz_" $(FUZZ_BUILD)/*.summary

fuzz-bins: $(addprefix $(BUILD)/fuzz/,$(FUZZERS) fuzz_seeds)
$(BUILD)/fuzz/fuzz_seeds: tests/fuzz/fuzz_seeds.c $(addprefix $(BUILD)/,$(FUZZ_LIBS))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INC_ALL) $(PC_CFLAGS) -o $@ $< -Wl,--start-group $(addprefix $(BUILD)/,$(FUZZ_LIBS)) -Wl,--end-group $(LDLIBS)
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(addprefix $(BUILD)/,$(FUZZ_LIBS))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(INC_ALL) $(PC_CFLAGS) -fsanitize=fuzzer -o $@ $< -Wl,--start-group $(addprefix $(BUILD)/,$(FUZZ_LIBS)) \
	  -Wl,--end-group $(LDLIBS) $(GW_LDLIBS)

fuzz-run-%:
	@mkdir -p $(BUILD)/corpus/$*
	@echo "fuzz: $* for $(FUZZ_SECONDS) s"
	@cd $(BUILD) && LLM_SHARED=$(abspath $(SHARED)) UBSAN_OPTIONS=print_stacktrace=1 \
	  ./fuzz/$* -max_total_time=$(FUZZ_SECONDS) -max_len=$(or $(FUZZ_MAXLEN_$*),8192) -timeout=20 \
	  -rss_limit_mb=3072 -print_final_stats=1 corpus/$* seeds/$(subst fuzz_,,$*) >$*.log 2>&1 \
	  || { tail -n 40 $*.log; echo "fuzz: $* FAILED (log: $(BUILD)/$*.log)"; exit 1; }
	@cd $(BUILD) && echo "$* $$(grep -o 'Done [0-9]* runs in [0-9]* second' $*.log | head -n 1), \
	  $$(grep -E '^#[0-9]+.*(DONE|cov:)' $*.log | tail -n 1 | grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[^ ]*'), \
	  $$(ls corpus/$* | wc -l) inputs in corpus" >$*.summary

run: all
	LLM_BIN=$(abspath $(BUILD)/bin) bash deploy/pipeline.sh start --model $(MODEL)
	$(BUILD)/bin/llmc -n 200 "Once upon a time"
	@echo
	@echo "The pipeline keeps running: 'bash deploy/pipeline.sh status', 'make stop' to stop it."

stop:
	LLM_BIN=$(abspath $(BUILD)/bin) bash deploy/pipeline.sh stop

bench: all
	bash bench/run.sh

soak: all
	$(TEST_ENV) SOAK_SECONDS=$${SOAK_SECONDS:-600} bash tests/e2e/60_soak.sh
	$(TEST_ENV) CHAOS_SECONDS=$${CHAOS_SECONDS:-600} bash tests/e2e/90_chaos.sh
	$(TEST_ENV) CHAOS_SECONDS=$${CHAOS_SECONDS:-600} CHAOS_KV_POOL=2048 bash tests/e2e/90_chaos.sh
	$(TEST_ENV) CHAOS_SECONDS=$${CHAOS_SECONDS:-600} CHAOS_KV_POOL=272 bash tests/e2e/90_chaos.sh
	$(TEST_ENV) E2E_PERF=1 bash tests/e2e/68_multihost.sh

# Installation, with the GNU variables. Every program goes to BINDIR, the daemons too:
# each has one-shot modes for users (engined --eval, tokenizerd --tokenize). The units
# get BINDIR and SYSCONFDIR written into their paths; llm-pipeline gets BINDIR as its
# default LLM_BIN. SYSCONFDIR is /etc whatever the prefix (the units read
# /etc/llm/llm.env), UNITDIR PREFIX/lib/systemd/system (in systemd's search path for
# /usr/local and /usr; the Debian package uses /lib/systemd/system).
PREFIX      ?= /usr/local
EXEC_PREFIX ?= $(PREFIX)
BINDIR      ?= $(EXEC_PREFIX)/bin
DATAROOTDIR ?= $(PREFIX)/share
MANDIR      ?= $(DATAROOTDIR)/man
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(PREFIX)/lib/systemd/system
INSTALL     ?= install
UNITS       := $(notdir $(wildcard deploy/systemd/*.service))
MAN_SRC     := $(wildcard docs/man/*.scd)
MANS        := $(patsubst docs/man/%.scd,$(BUILD)/man/%,$(MAN_SRC))

# Man pages: one scdoc source each (docs/man/NAME.SECTION.scd).
man: $(MANS)
$(BUILD)/man/%: docs/man/%.scd
	@mkdir -p $(dir $@)
	scdoc < $< > $@.tmp && mv $@.tmp $@

install: $(BINS) $(MANS)
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
	  $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/llm
	$(INSTALL) -m 0755 $(BINS) $(DESTDIR)$(BINDIR)/
	sed 's|^BIN=\$${LLM_BIN:-.*|BIN=$${LLM_BIN:-$(BINDIR)}|' deploy/pipeline.sh > $(BUILD)/llm-pipeline
	$(INSTALL) -m 0755 $(BUILD)/llm-pipeline $(DESTDIR)$(BINDIR)/llm-pipeline
	@for u in $(UNITS); do \
	  sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/etc/llm/|$(SYSCONFDIR)/llm/|g' deploy/systemd/$$u > $(BUILD)/$$u; \
	  echo "$(INSTALL) -m 0644 $(BUILD)/$$u $(DESTDIR)$(UNITDIR)/$$u"; \
	  $(INSTALL) -m 0644 $(BUILD)/$$u $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	@# the configuration is the administrator's once installed: never overwritten
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/llm/llm.env ]; then echo "keeping $(DESTDIR)$(SYSCONFDIR)/llm/llm.env"; \
	  else echo "$(INSTALL) -m 0600 deploy/llm.env $(DESTDIR)$(SYSCONFDIR)/llm/llm.env"; \
	  $(INSTALL) -m 0600 deploy/llm.env $(DESTDIR)$(SYSCONFDIR)/llm/llm.env; fi
	$(INSTALL) -m 0644 $(filter %.1,$(MANS)) $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 0644 $(filter %.8,$(MANS)) $(DESTDIR)$(MANDIR)/man8/

# Removes what install put there, the configuration too when it is unchanged.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(BINS)) llm-pipeline) \
	  $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS)) \
	  $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(filter %.1,$(MANS)))) \
	  $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(filter %.8,$(MANS))))
	@if cmp -s deploy/llm.env $(DESTDIR)$(SYSCONFDIR)/llm/llm.env; then rm -f $(DESTDIR)$(SYSCONFDIR)/llm/llm.env; \
	  rmdir $(DESTDIR)$(SYSCONFDIR)/llm 2>/dev/null || true; \
	  elif [ -e $(DESTDIR)$(SYSCONFDIR)/llm/llm.env ]; then echo "keeping $(DESTDIR)$(SYSCONFDIR)/llm/llm.env (changed)"; fi

# aarch64 without ARM hardware: the suites that hold the kernels to the scalar twin
# (kernels, qn) and the logits to llama.cpp's (forward), cross-built with Debian's
# gcc-aarch64-linux-gnu (the suites and tests/runner.c against tests/minicheck, Check's
# API without libcheck, so no arm64 packages are needed) and run under qemu-user.
# test-arm (part of make test) runs the kernels and qn suites on three emulated CPUs, two
# at a time: "max" (dotprod and i8mm: the neoni8mm table is the automatic choice, and the
# neon table is checked beside it), "neoverse-n1" (dotprod only, as Graviton 2: neon) and
# "cortex-a53" (neither: the scalar fallback); test-arm-forward the forward suite on
# "max" (its every-table test covers neoni8mm, neon and scalar; minutes under emulation).
# The kvq8 suite (q8_0 KV cache: invariance and every table's bits with the NEON q8_0
# attention) is built too, run by hand: make test-arm ARM_SUITES=kvq8 ARM_CPUS=max_neoni8mm.
# LLM_TEST_EXPECT_KERNELS makes the dispatch test check the detection on each CPU.
ARM_CC     ?= aarch64-linux-gnu-gcc
ARM_AR     ?= aarch64-linux-gnu-ar
ARM_QEMU   ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
ARM_BUILD  := $(BUILD)/arm
ARM_SUITES ?= kernels qn
ARM_CPUS   ?= max_neoni8mm neoverse-n1_neon cortex-a53_scalar
# everything the suites reach, without the ZeroMQ and msgpack parts
ARM_LIB_SRC := $(filter-out common/net.c common/proto.c common/zap.c,$(COMMON_SRC)) \
               $(filter-out engined/master.c engined/worker.c engined/worker_kv.c engined/worker_io.c,$(ENGINE_SRC))
ARM_TEST_SRC := tests/check_kernels.c tests/check_qn.c tests/check_forward.c tests/check_kvq8.c tests/runner.c \
                tests/minicheck/minicheck.c
ARM_CFLAGS  = $(CSTD) $(WARN) $(OPT) -pthread -MMD -MP
arm_obj = $(patsubst %.c,$(ARM_BUILD)/obj/%.o,$(1))

$(ARM_BUILD)/suites.inc: Makefile
	@mkdir -p $(dir $@)
	@for s in kernels qn forward kvq8; do echo "SUITE($$s)"; done > $@
$(ARM_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(ARM_CC) $(ARM_CFLAGS) $(INC_ALL) -c $< -o $@
$(ARM_BUILD)/obj/tests/%.o: tests/%.c $(ARM_BUILD)/suites.inc
	@mkdir -p $(dir $@)
	$(ARM_CC) $(ARM_CFLAGS) $(INC_ALL) -Itests/minicheck -I$(ARM_BUILD) -c $< -o $@
$(ARM_BUILD)/libarm.a: $(call arm_obj,$(ARM_LIB_SRC))
	@rm -f $@
	$(ARM_AR) rcs $@ $^
$(ARM_BUILD)/check_arm: $(call arm_obj,$(ARM_TEST_SRC)) $(ARM_BUILD)/libarm.a
	$(ARM_CC) $(ARM_CFLAGS) -o $@ $^ -lm -lrt

test-arm: deps
	@$(MAKE) --no-print-directory $(SUB_J) $(ARM_BUILD)/check_arm
	@$(MAKE) --no-print-directory $(SUB_J) $(addprefix test-arm-cpu-,$(ARM_CPUS))
test-arm-forward: deps
	@$(MAKE) --no-print-directory test-arm ARM_SUITES=forward ARM_CPUS=max_neoni8mm
# One emulated CPU (test-arm-cpu-CPU_TABLE): the suites in turn, the log in $(ARM_BUILD).
test-arm-cpu-%:
	@cpu=$(word 1,$(subst _, ,$*)); log=$(ARM_BUILD)/test-$$cpu.log; start=$$(date +%s); \
	export LLM_TEST_EXPECT_KERNELS=$(word 2,$(subst _, ,$*)) CK_TIMEOUT_MULTIPLIER=5 $(TEST_ENV); \
	if (for s in $(ARM_SUITES); do CK_RUN_SUITE=$$s $(ARM_QEMU) -cpu $$cpu $(ARM_BUILD)/check_arm || exit 1; done) \
	   >$$log 2>&1; then \
	  echo "test-arm: -cpu $$cpu: suites $(ARM_SUITES) passed in $$(( $$(date +%s) - start )) s"; \
	else tail -n 40 $$log; echo "test-arm: -cpu $$cpu FAILED (log: $$log)"; exit 1; fi

# The Debian package (dpkg-deb, from this tree, no network): deploy/deb.sh builds the
# programs again in $(BUILD)-deb with Debian's hardening flags (dpkg-buildflags) and
# leaves $(BUILD)/deb/llm-pipeline_VERSION_ARCH.deb.
deb:
	BUILD=$(BUILD) bash deploy/deb.sh

# The deployment test (podman, systemd in a container; minutes): not part of make test.
test-deploy: deb
	$(TEST_ENV) bash tests/deploy/run.sh

clean:
	rm -rf build build-asan build-*

-include $(shell find $(BUILD)/obj $(ARM_BUILD)/obj -name '*.d' 2>/dev/null)
