#!/usr/bin/env python3
"""Checks that no object of libnibble.a holds an instruction its CPUs may lack.

usage: check_isa_encodings.py OBJDUMP x86_64|aarch64 LIBNIBBLE.a

Each member of the archive is disassembled and classed by its name:
  x86_64:  avx512*.cpp.o  may use anything;
           avx2.cpp.o, avxvnni.cpp.o  no EVEX-encoded instruction (AVX-512), which would fault
             on the AVX2-only CPUs that dispatch gives these kernels to;
           every other member (scalar.cpp.o, the API, GGUF, calibration code)  no VEX or EVEX
             instruction: they run on any x86-64 CPU, before or without dispatch.
  aarch64: neondot.cpp.o may use the dot-product instructions (sdot, udot), no other member.
A member that must hold such instructions (avx512*.cpp.o: EVEX, neondot.cpp.o: sdot / udot) is
checked for them too, so that a disassembly this script cannot read fails instead of passing.

The emulated runs (tests/cross/run_x86_emulated.sh on Haswell / Nehalem, run_neon.sh on
cortex-a53) catch the same faults only in the code their tests reach; this reads all of it.
Exit status: 0 when every member passes, 1 otherwise (the offending instructions are printed).
"""
import re
import subprocess
import sys

# Legacy prefixes that may precede a VEX / EVEX prefix in 64-bit code (segment, operand and
# address size; a REX prefix may not).
X86_PREFIXES = {"26", "2e", "36", "3e", "64", "65", "66", "67", "f2", "f3"}


def members(objdump, lib):
    """Yields (member name, [(raw bytes, instruction text), ...]) for each member."""
    out = subprocess.run([objdump, "-d", "-w", lib], check=True, capture_output=True,
                         text=True).stdout
    name, insns = None, []
    for line in out.splitlines():
        m = re.match(r"^(\S+\.o):\s+file format", line)
        if m:
            if name is not None:
                yield name, insns
            name, insns = m.group(1), []
            continue
        # "  addr:\tBYTES\tMNEMONIC OPERANDS" (-w: one line per instruction)
        parts = line.split("\t")
        if name is not None and len(parts) >= 3 and re.match(r"^\s*[0-9a-f]+:$", parts[0]):
            insns.append((parts[1].split(), " ".join(p.strip() for p in parts[2:])))
    if name is not None:
        yield name, insns


def x86_kind(raw):
    i = 0
    while i < len(raw) and raw[i] in X86_PREFIXES:
        i += 1
    if i < len(raw):
        if raw[i] == "62":
            return "evex"
        if raw[i] in ("c4", "c5"):
            return "vex"
    return None


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("x86_64", "aarch64"):
        print(__doc__, file=sys.stderr)
        return 2
    objdump, arch, lib = sys.argv[1:]
    bad, seen, required = [], set(), {}
    for name, insns in members(objdump, lib):
        seen.add(name)
        if arch == "x86_64":
            if name.startswith("avx512"):
                required[name] = any(x86_kind(raw) == "evex" for raw, _ in insns)
                continue
            banned = {"evex"} if name in ("avx2.cpp.o", "avxvnni.cpp.o") else {"evex", "vex"}
            hits = [text for raw, text in insns if x86_kind(raw) in banned]
        else:
            dot = [text for _, text in insns if re.match(r"^[su]dot\b", text)]
            if name == "neondot.cpp.o":
                required[name] = bool(dot)
                continue
            hits = dot
        if hits:
            bad.append(f"{name}: {len(hits)} instructions its CPUs may lack, e.g. {hits[:3]}")
        print(f"{name}: {len(insns)} instructions, {len(hits)} outside its ISA")
    for name, ok in required.items():
        print(f"{name}: {'holds' if ok else 'does NOT hold'} its ISA's own instructions")
        if not ok:
            bad.append(f"{name}: none of its ISA's own instructions found (unreadable disassembly?)")
    if not required:
        bad.append("no member of the top ISA (avx512*.cpp.o / neondot.cpp.o) to check against")
    if not seen:
        bad.append(f"no members read from {lib}")
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
