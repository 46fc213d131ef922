// The wavefront's waiting rule (backend/cpu/cpu_backend.h: wave_wait), which
// wave_runner applies before each chunk of a cell. The bit-equality tests of
// test_backends (ResultsDoNotDependOnThreadCount) run the wavefront on real
// threads, but whether a missing wait shows there depends on which runner
// the scheduler lets finish first; the rule itself is checked here, on every
// cell and chunk of a set of module shapes.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace {

using ferry::Layer;
using ferry::cpu::wave_wait;
using ferry::cpu::WaveWait;

Layer module(uint32_t num_layers, uint32_t dirs) {
  Layer l;
  l.num_layers = num_layers;
  l.dirs = dirs;
  return l;
}

// Whether cell `ci` may start chunk `c` after waiting as wave_wait says,
// given how many chunks each cell has finished.
bool satisfied(const WaveWait& w, const std::vector<size_t>& done) {
  for (uint32_t b = w.first; b < w.first + w.count; ++b) {
    if (done[b] < w.need) return false;
  }
  return true;
}

TEST(WaveWait, TwoDirectionsWaitForBothCellsOfTheLayerBelow) {
  const size_t chunks = 4;
  const Layer l = module(3, 2);
  for (bool overlap : {false, true}) {
    for (uint32_t ci = 0; ci < 6; ++ci) {
      for (size_t c = 0; c < chunks; ++c) {
        const WaveWait w = wave_wait(l, ci, c, chunks, overlap);
        if (ci < 2 || c > 0) {  // layer 0, or a later chunk: the wait before chunk 0 covered it
          EXPECT_EQ(w.count, 0u) << "cell " << ci << " chunk " << c;
          continue;
        }
        const uint32_t below = (ci / 2 - 1) * 2;
        EXPECT_EQ(w.first, below) << "cell " << ci;
        EXPECT_EQ(w.count, 2u) << "cell " << ci << ": both directions of the layer below";
        EXPECT_EQ(w.need, chunks) << "cell " << ci << ": all their chunks";
      }
    }
  }
  // The case a scheduler decides: layer 0's forward cell has finished, its
  // backward cell has not. Neither cell of layer 1 may start.
  std::vector<size_t> done = {chunks, chunks - 1, 0, 0, 0, 0};
  EXPECT_FALSE(satisfied(wave_wait(l, 2, 0, chunks, false), done));
  EXPECT_FALSE(satisfied(wave_wait(l, 3, 0, chunks, false), done));
  done = {chunks - 1, chunks, 0, 0, 0, 0};
  EXPECT_FALSE(satisfied(wave_wait(l, 2, 0, chunks, false), done));
  EXPECT_FALSE(satisfied(wave_wait(l, 3, 0, chunks, false), done));
  done = {chunks, chunks, 0, 0, 0, 0};
  EXPECT_TRUE(satisfied(wave_wait(l, 2, 0, chunks, false), done));
  EXPECT_TRUE(satisfied(wave_wait(l, 3, 0, chunks, false), done));
  // Layer 2 waits on layer 1, not on layer 0.
  EXPECT_FALSE(satisfied(wave_wait(l, 4, 0, chunks, false), done));
}

TEST(WaveWait, StackedLayersWaitForTheChunksTheyRead) {
  const size_t chunks = 5;
  const Layer l = module(3, 1);
  for (uint32_t ci = 0; ci < 3; ++ci) {
    for (size_t c = 0; c < chunks; ++c) {
      for (bool overlap : {false, true}) {
        const WaveWait w = wave_wait(l, ci, c, chunks, overlap);
        if (ci == 0) {
          EXPECT_EQ(w.count, 0u);
          continue;
        }
        EXPECT_EQ(w.first, ci - 1);
        EXPECT_EQ(w.count, 1u);
        // Chunk c reads the layer below's rows of chunk c; projecting the
        // next chunk inside the steps also reads chunk c + 1 (there is none
        // after the last).
        const size_t need = overlap && c + 1 < chunks ? c + 2 : c + 1;
        EXPECT_EQ(w.need, need) << "cell " << ci << " chunk " << c << " overlap " << overlap;
      }
    }
  }
}

// Runners take cells in index order, so a cell that waits only on lower
// cells can never be part of a cycle; and a whole run completes when one
// runner takes every cell in order (a pool that gives one thread).
TEST(WaveWait, CellsWaitOnlyOnEarlierCellsAndOneRunnerCompletes) {
  for (uint32_t dirs : {1u, 2u}) {
    for (uint32_t layers : {1u, 2u, 3u, 4u}) {
      for (size_t chunks : {size_t{1}, size_t{2}, size_t{7}}) {
        for (bool overlap : {false, true}) {
          const Layer l = module(layers, dirs);
          const uint32_t cells = layers * dirs;
          std::vector<size_t> done(cells, 0);
          for (uint32_t ci = 0; ci < cells; ++ci) {
            for (size_t c = 0; c < chunks; ++c) {
              const WaveWait w = wave_wait(l, ci, c, chunks, overlap);
              EXPECT_LE(w.first + w.count, ci) << "cell " << ci << " waits on itself or a later cell";
              EXPECT_LE(w.need, chunks);
              ASSERT_TRUE(satisfied(w, done)) << "one runner would wait forever: cell " << ci << " chunk " << c;
              done[ci] = c + 1;
            }
          }
        }
      }
    }
  }
}

}  // namespace
