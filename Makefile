# kvtier front door. Every target is idempotent; `make demo` and `make test`
# work on a fresh Debian 12 machine as root.
SHELL := /bin/bash
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

DEB_PACKAGES := cmake ninja-build g++ pkg-config liburing-dev libxxhash-dev libssl-dev \
  libhiredis-dev redis-server redis-tools nlohmann-json3-dev libcli11-dev libspdlog-dev \
  libfmt-dev libcpp-httplib-dev libtomlplusplus-dev libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev python3-jinja2 \
  chromium qemu-user \
  python3-dev pybind11-dev python3-numpy python3-torch python3-pytest

.PHONY: deps build python test demo fixture-model bench test-asan test-tsan format clean

# Installs only what is missing; runs `apt-get update` only when something must be installed.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make deps: all Debian packages present"; fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The Python package, built in place: python/kvtier/_kvtier*.so (docs/PYTHON.md).
python: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target _kvtier

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The demo's model: the `small` preset's synthetic weights with a real vocabulary
# and chat template (Qwen2's tokenizer, Qwen2.5's template; tests/data), so the
# demo is a chat and its table shows real text.
DEMO_MODEL := $(BUILD)/demo-small-qwen2-chat.gguf

demo: build
	@test -f $(DEMO_MODEL) || ./$(BUILD)/tools/kvtier model make --preset small --dtype f16 \
	  --vocab tests/data/vocab/ggml-vocab-qwen2.gguf \
	  --chat-template tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja --out $(DEMO_MODEL)
	./$(BUILD)/tools/kvtier demo --model $(DEMO_MODEL) --disk-dir $(BUILD)/demo-cache

# The trained fixture model (tests/data/models/README.md): about 25 minutes on 2 cores.
fixture-model: build
	/usr/bin/python3 scripts/train_fixture.py --kvtier $(BUILD)/tools/kvtier

bench: build
	./$(BUILD)/tools/kvtier bench index --trace ../shared/traces/mooncake_synthetic_trace.jsonl
	./$(BUILD)/tools/kvtier bench tiers --dir $(BUILD)/bench-tiers
	./$(BUILD)/tools/kvtier bench engine --model small
	./$(BUILD)/tools/kvtier bench ttft --model small --prefix 1024,4096,16384
	for v in llama-bpe qwen2 llama-spm; do ./$(BUILD)/tools/kvtier bench tokenize --model tests/data/vocab/ggml-vocab-$$v.gguf; done

test-asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_SANITIZE=address
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) --timeout 1800

test-tsan: deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_SANITIZE=thread
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) --timeout 1800

format:
	find include src tools tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan build-tsan
