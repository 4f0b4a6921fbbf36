// nibble CLI: `nibble info` (GGUF metadata and tensor table).
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "nibble/io/gguf.hpp"

int cmd_info(int argc, char** argv) {
  std::string path;
  bool all = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf(
          "usage: nibble info FILE.gguf [--all]\n"
          "  prints the metadata (arrays shortened unless --all) and the tensor table\n");
      return 0;
    } else if (a == "--all") {
      all = true;
    } else if (path.empty() && !(a.size() > 1 && a[0] == '-')) {
      path = a;
    } else {
      std::fprintf(stderr, "nibble info: unexpected argument %s\n", a.c_str());
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: nibble info FILE.gguf [--all]\n");
    return 2;
  }
  try {
    const nibble::gguf::File f = nibble::gguf::File::open(path);
    std::printf("file: %s\nGGUF version %u, %llu bytes, alignment %u, data at byte %llu\n",
                path.c_str(), f.version, static_cast<unsigned long long>(f.file_size), f.alignment,
                static_cast<unsigned long long>(f.data_offset));
    std::printf("\nmetadata (%zu):\n", f.metadata.size());
    for (const auto& kv : f.metadata) {
      const std::string v = kv.value.to_string(all ? static_cast<std::size_t>(-1) : 8);
      std::printf("  %-45s %-7s %s\n", kv.key.c_str(), nibble::gguf::value_type_name(kv.value.type),
                  v.c_str());
    }
    std::printf("\ntensors (%zu):\n  %-5s %-45s %-8s %-28s %14s\n", f.tensors.size(), "#", "name",
                "type", "shape", "bytes");
    unsigned long long total = 0, elems = 0, packed = 0;
    for (std::size_t i = 0; i < f.tensors.size(); ++i) {
      const auto& t = f.tensors[i];
      std::string shape = "[";
      for (std::size_t d = 0; d < t.shape.size(); ++d) {
        if (d) shape += ", ";
        shape += std::to_string(t.shape[d]);
      }
      shape += "]";
      std::printf("  %-5zu %-45s %-8s %-28s %14llu\n", i, t.name.c_str(),
                  nibble::gguf::type_info(t.type).name, shape.c_str(),
                  static_cast<unsigned long long>(t.nbytes));
      total += t.nbytes;
      packed += t.packed() ? 1 : 0;
      elems += static_cast<unsigned long long>(t.elements());
    }
    std::printf("\ntotal: %llu values, %llu bytes of tensor data, %.3f bits per weight\n", elems,
                total, elems ? 8.0 * double(total) / double(elems) : 0.0);
    if (packed) {
      std::printf(
          "packed: %llu tensors in nibble's packed layout (type .x16 = type id 0x%x | ggml type;\n"
          "        llama.cpp cannot read them, `nibble unpack` restores the plain layout)\n",
          packed, nibble::gguf::kPackedTypeFlag);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
