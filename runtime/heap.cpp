// The host heap a rank runs on (engine.h): glibc tuned and pre-faulted so that tensor memory
// behaves like a caching allocator's.
#include <malloc.h>

#include <cstdlib>
#include <limits>
#include <vector>

#include "engine.h"

namespace optpipe::runtime {

void keep_freed_memory() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

void reserve_heap(int64_t bytes) {
  constexpr int64_t kBlock = 4 << 20;
  std::vector<char*> blocks;
  for (int64_t done = 0; done < bytes; done += kBlock) {
    char* b = static_cast<char*>(std::malloc(kBlock));
    if (!b) break;
    for (int64_t i = 0; i < kBlock; i += 4096) reinterpret_cast<volatile char*>(b)[i] = 0;
    blocks.push_back(b);
  }
  for (char* b : blocks) std::free(b);
}

}  // namespace optpipe::runtime
