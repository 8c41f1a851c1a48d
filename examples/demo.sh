#!/usr/bin/env bash
# The quickstart behind `make demo`: scaffold a domain, validate it, list its tools, call one,
# and validate the built-in domains. Runs offline in a scratch folder (out/demo).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MUACTL="$ROOT/.venv/bin/muactl"
rm -rf "$ROOT/out/demo" && mkdir -p "$ROOT/out/demo" && cd "$ROOT/out/demo"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "muactl init clinic"
"$MUACTL" init clinic
step "muactl validate clinic"
"$MUACTL" validate clinic
step "muactl tools clinic"
"$MUACTL" tools clinic
step "muactl call clinic find_patient_by_phone '{\"phone\": \"5550101\"}'"
"$MUACTL" call clinic find_patient_by_phone '{"phone": "5550101"}'
step "muactl validate retail && muactl validate bank"
"$MUACTL" validate retail
"$MUACTL" validate bank
step "muactl domains"
"$MUACTL" domains
