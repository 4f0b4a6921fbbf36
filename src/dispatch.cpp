// nibble: run-time ISA dispatch (see dispatch.hpp for the rules).
#include "dispatch.hpp"

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include "nibble/core/cpu.hpp"
#include "nibble/core/error.hpp"
#include "tables.hpp"

namespace nibble::detail {
namespace {

struct Registry {
  std::vector<TableVariant> runnable;
  std::vector<const char*> built;
  // Table per Isa value (null: not runnable).
  const kernels::KernelTable* by_isa[std::size(kAllIsas)] = {};
};

// Whether this CPU can run the table variant NAME (any variant of this processor family).
bool cpu_runs(const char* name) {
  const CpuFeatures& c = cpu_features();
  const bool avx2 = c.avx2 && c.fma && c.f16c && c.bmi2;
  const bool avx512 = avx2 && c.avx512f && c.avx512cd && c.avx512bw && c.avx512dq && c.avx512vl;
  const std::string n = name;
  if (n == "scalar") return true;
  if (n == "avx2") return avx2;
  if (n == "avxvnni") return avx2 && c.avxvnni;
  if (n == "avx512") return avx512;
  if (n == "avx512vnni") return avx512 && c.avx512vnni;
  if (n == "neon") return c.neon;
  if (n == "neondot") return c.neon && c.dotprod;
  return false;
}

// The variants of this processor family, in order of preference within one Isa.
#if defined(__x86_64__) || defined(_M_X64)
constexpr const char* kFamilyVariants[] = {"scalar", "avx2", "avxvnni", "avx512", "avx512vnni"};
#elif defined(__aarch64__)
constexpr const char* kFamilyVariants[] = {"scalar", "neon", "neondot"};
#else
constexpr const char* kFamilyVariants[] = {"scalar"};
#endif

Registry build_registry() {
  Registry r;
  // A table is only constructed when the CPU can run it: building one executes code compiled
  // with that ISA's flags. Each variant is its own TU, which a build may leave out (NIBBLE_ISAS).
  auto add = [&r](const char* name, Isa isa, const kernels::KernelTable& (*get)()) {
    r.built.push_back(name);
    if (!cpu_runs(name)) return;
    const kernels::KernelTable* t = &get();
    r.runnable.push_back({name, isa, t});
    r.by_isa[static_cast<int>(isa)] = t;  // later (better) variants of one Isa win
  };
  add("scalar", Isa::scalar, &kernels::table_scalar);
#if defined(NIBBLE_BUILT_AVX2)
  add("avx2", Isa::avx2, &kernels::table_avx2);
#endif
#if defined(NIBBLE_BUILT_AVXVNNI)
  add("avxvnni", Isa::avxvnni, &kernels::table_avxvnni);
#endif
#if defined(NIBBLE_BUILT_AVX512)
  add("avx512", Isa::avx512, &kernels::table_avx512);
#endif
#if defined(NIBBLE_BUILT_AVX512VNNI)
  add("avx512vnni", Isa::avx512, &kernels::table_avx512vnni);
#endif
#if defined(NIBBLE_BUILT_NEON)
  add("neon", Isa::neon, &kernels::table_neon);
#endif
#if defined(NIBBLE_BUILT_NEONDOT)
  add("neondot", Isa::neon, &kernels::table_neondot);
#endif
  return r;
}

const Registry& registry() {
  static const Registry r = build_registry();
  return r;
}

// Rank used by the NIBBLE_ISA cap: scalar < avx2 < avxvnni < avx512, scalar < neon.
int rank(Isa i) {
  switch (i) {
    case Isa::scalar:
      return 0;
    case Isa::avx2:
      return 1;
    case Isa::avxvnni:
      return 2;
    case Isa::avx512:
      return 3;
    case Isa::neon:
      return 1;
  }
  return 0;
}

struct EnvCap {
  bool set = false;
  bool valid = true;
  Isa isa = Isa::scalar;
  std::string raw;
};

EnvCap read_env() {
  EnvCap e;
  const char* v = std::getenv("NIBBLE_ISA");
  if (v == nullptr || *v == '\0') return e;
  e.set = true;
  e.raw = v;
  for (Isa i : kAllIsas) {
    if (e.raw == isa_name(i)) {
      e.isa = i;
      return e;
    }
  }
  e.valid = false;
  return e;
}

const EnvCap& env_cap() {
  static const EnvCap e = read_env();
  return e;
}

Isa best_under_env() {
  const Registry& r = registry();
  const EnvCap& e = env_cap();
  if (e.set && !e.valid) {
    fail("NIBBLE_ISA = \"", e.raw, "\" is not one of scalar, avx2, avxvnni, avx512, neon");
  }
  Isa best = Isa::scalar;
  for (const TableVariant& v : r.runnable) {
    if (e.set) {
      // Capped: same family (x86 or arm) and not above the named ISA.
      const bool arm_v = v.isa == Isa::neon, arm_e = e.isa == Isa::neon;
      if (v.isa != Isa::scalar && (arm_v != arm_e || rank(v.isa) > rank(e.isa))) continue;
    }
    if (rank(v.isa) >= rank(best)) best = v.isa;
  }
  return best;
}

}  // namespace

const std::vector<TableVariant>& runnable_tables() {
  return registry().runnable;
}

std::vector<const char*> built_table_names() {
  return registry().built;
}

std::vector<const char*> cpu_table_names() {
  std::vector<const char*> out;
  for (const char* n : kFamilyVariants)
    if (cpu_runs(n)) out.push_back(n);
  return out;
}

const kernels::KernelTable& scalar_table() {
  return kernels::table_scalar();
}

Isa resolve_isa(const Context& ctx) {
  if (ctx.isa) {
    const int k = static_cast<int>(*ctx.isa);
    if (k < 0 || k >= static_cast<int>(std::size(kAllIsas)))
      fail("Context::isa = ", k, " is not a valid nibble::Isa");
    if (registry().by_isa[k] == nullptr) {
      std::string have;
      for (const TableVariant& v : registry().runnable) {
        have += have.empty() ? "" : ", ";
        have += v.name;
      }
      fail("Context::isa = ", isa_name(*ctx.isa),
           " is not available (this build and CPU can run: ", have, ")");
    }
    return *ctx.isa;
  }
  static const Isa cached = best_under_env();
  return cached;
}

const kernels::KernelTable& select_table(const Context& ctx) {
  return *registry().by_isa[static_cast<int>(resolve_isa(ctx))];
}

}  // namespace nibble::detail
