#!/usr/bin/env bash
# The CLI as a user meets it: help on every subcommand, the formats listing, and one clear error
# (exit status 1, message naming what was wrong) for bad input.
set -u
qattn=$1
fail=0
check() {  # check NAME EXPECTED_RC|nz PATTERN -- command...
  local name=$1 want_rc=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if { [[ $want_rc == nz ]] && [[ $rc -eq 0 ]]; } || { [[ $want_rc != nz ]] && [[ $rc -ne $want_rc ]]; } || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $want_rc), output lacks /$pattern/:"
    echo "$out" | head -20
    fail=1
  else
    echo "ok   $name"
  fi
}
check "help" 0 "formats" -- "$qattn" --help
check "formats help" 0 "--table" -- "$qattn" formats --help
check "bench help" 0 "reference" -- "$qattn" bench --help
check "bench reference help" 0 "--head-dims" -- "$qattn" bench reference --help
check "formats summary" 0 "^e4m3 +8 +448 " -- "$qattn" formats
check "formats summary fnuz" 0 "^e4m3fnuz +8 +240 " -- "$qattn" formats
check "one format" 0 "^e2m1 +4 +6 +1 +0.5 +0.5 +0.25 " -- "$qattn" formats e2m1
check "e4m3 table header" 0 "^code,hex,value" -- "$qattn" formats e4m3 --table
check "e4m3 table max" 0 "^126,0x7e,448$" -- "$qattn" formats e4m3 --table
check "e4m3 table nan" 0 "^255,0xff,nan$" -- "$qattn" formats e4m3 --table
check "e5m2 table -inf" 0 "^252,0xfc,-inf$" -- "$qattn" formats e5m2 --table
check "unknown format" 1 "unknown format 'fp9'; expected one of: fp32, bf16" -- "$qattn" formats fp9 --table
check "fp32 table refused" 1 "32-bit format has too many codes" -- "$qattn" formats fp32 --table
check "no subcommand" nz "subcommand" -- "$qattn"
check "bad option" nz "nosuch" -- "$qattn" formats --nosuch
exit $fail
