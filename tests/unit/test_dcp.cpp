// Distributed checkpoint directories (converter/src/checkpoint/dcp.h) on the
// two directories torch 2.11 wrote (tests/fixtures/torch2_forms: one rank;
// two ranks with every tensor sharded by rows): the metadata records, the
// names from planner_data, the selection of the model's key, and the
// sharded tensors reassembled, each row block checked against the values
// its chunk's zip stores (read with the zip reader alone).
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/dcp.h"
#include "error.h"
#include "io/mapped_file.h"
#include "io/zip_reader.h"

namespace ferry::conv {
namespace {

const std::string kTorch2 = std::string(FERRY_FIXTURES_DIR) + "/torch2_forms/";

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

DcpMetadata metadata_of(const std::string& dir) {
  const std::vector<uint8_t> b = file_bytes(kTorch2 + dir + "/.metadata");
  return parse_dcp_metadata(b.data(), b.size(), dir + "/.metadata");
}

const DcpEntry& entry(const DcpMetadata& md, const std::string& fqn) {
  for (const DcpEntry& e : md.entries)
    if (e.fqn == fqn) return e;
  throw Error("no entry " + fqn);
}

TEST(Dcp, MetadataOfOneRank) {
  const DcpMetadata md = metadata_of("dcp_single");
  EXPECT_EQ(md.version, "1.0.0");
  ASSERT_EQ(md.entries.size(), 6u);
  EXPECT_EQ(md.entries[0].fqn, "model.lstm.weight_ih_l0");  // state-dict order
  const DcpEntry& w = entry(md, "model.lstm.weight_hh_l0");
  EXPECT_TRUE(w.is_tensor);
  EXPECT_EQ(w.dtype, "float32");
  EXPECT_EQ(w.size, (std::vector<int64_t>{80, 20}));
  EXPECT_EQ(w.path, (std::vector<std::string>{"model", "lstm.weight_hh_l0"}));
  ASSERT_EQ(w.chunks.size(), 1u);
  EXPECT_EQ(w.chunks[0].file, "__0_0.distcp");
  EXPECT_EQ(w.chunks[0].offset, 10509u);  // as storage_data records it
  EXPECT_EQ(w.chunks[0].length, 7977u);
}

TEST(Dcp, MetadataOfTwoRanks) {
  const DcpMetadata md = metadata_of("dcp_sharded");
  const DcpEntry& w = entry(md, "model.lstm.weight_hh_l0");
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[0].offsets, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(w.chunks[0].sizes, (std::vector<int64_t>{40, 20}));
  EXPECT_EQ(w.chunks[0].file, "__0_0.distcp");
  EXPECT_EQ(w.chunks[1].offsets, (std::vector<int64_t>{40, 0}));
  EXPECT_EQ(w.chunks[1].file, "__1_0.distcp");
  EXPECT_EQ(w.chunks[1].offset, 8973u);
  // head.bias [1] over two ranks: rank 1 holds an empty chunk at offset 1.
  const DcpEntry& b = entry(md, "model.head.bias");
  ASSERT_EQ(b.chunks.size(), 2u);
  EXPECT_EQ(b.chunks[1].offsets, (std::vector<int64_t>{1}));
  EXPECT_EQ(b.chunks[1].sizes, (std::vector<int64_t>{0}));
}

// Each row block of a reassembled tensor holds its chunk's values, as the
// zip of the chunk's byte range stores them (data/0).
TEST(Dcp, ShardsReassembleToTheirChunks) {
  std::vector<DcpFile> files;
  const Checkpoint c = read_dcp_directory(kTorch2 + "dcp_sharded", {}, &files);
  EXPECT_EQ(c.form, "DCP directory (2 data files) training checkpoint (key 'model')");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].name, ".metadata");
  EXPECT_EQ(files[1].name, "__0_0.distcp");
  EXPECT_EQ(files[2].name, "__1_0.distcp");
  const DcpMetadata md = metadata_of("dcp_sharded");
  size_t checked = 0;
  for (const TensorRef& t : c.tensors) {
    const DcpEntry& e = entry(md, "model." + t.name);
    EXPECT_EQ(t.shape, e.size) << t.name;
    // Exactly the tensor's bytes, owned.
    ASSERT_TRUE(t.storage->owned) << t.name;
    EXPECT_EQ(t.storage->owned->size(), static_cast<size_t>(t.numel()) * 4) << t.name;
    const std::vector<float> whole = to_float32(t);
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    for (const DcpChunk& chunk : e.chunks) {
      int64_t n = 1;
      for (int64_t d : chunk.sizes) n *= d;
      if (n == 0) continue;
      // The chunk's range, read with the zip reader alone: its data/0 record.
      const std::vector<uint8_t> data = file_bytes(kTorch2 + "dcp_sharded/" + chunk.file);
      ASSERT_LE(chunk.offset + chunk.length, data.size());
      const ZipReader zip(data.data() + chunk.offset, chunk.length, chunk.file);
      const ByteSpan record = zip.stored("data/0");
      ASSERT_EQ(record.size, static_cast<size_t>(n) * 4) << t.name;
      std::vector<float> values(static_cast<size_t>(n));
      std::memcpy(values.data(), record.data, record.size);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = chunk.offsets[0] + i / cols, col = (t.shape.size() == 2 ? chunk.offsets[1] : 0) + i % cols;
        ASSERT_EQ(whole[static_cast<size_t>(row * cols + col)], values[static_cast<size_t>(i)]) << t.name << " " << i;
      }
      ++checked;
    }
  }
  // 6 tensors x 2 chunks, less the head's empty second chunks (weight and bias).
  EXPECT_EQ(checked, 10u);
}

// A one-rank tensor is a view of its mapped data file: no copy.
TEST(Dcp, OneChunkTensorsViewTheirFile) {
  std::vector<DcpFile> files;
  const Checkpoint c = read_dcp_directory(kTorch2 + "dcp_single/", {}, &files);
  ASSERT_EQ(files.size(), 2u);
  const MappedFile& data = *files[1].file;
  for (const TensorRef& t : c.tensors) {
    EXPECT_FALSE(t.storage->owned) << t.name;
    EXPECT_GE(t.storage->data, data.data()) << t.name;
    EXPECT_LE(t.storage->data + t.storage->nbytes, data.data() + data.size()) << t.name;
    EXPECT_EQ(t.storage->keep_alive.get(), static_cast<const void*>(&data)) << t.name;
  }
}

TEST(Dcp, KeySelection) {
  LoadOptions key;
  key.key = "model";
  const Checkpoint with = read_dcp_directory(kTorch2 + "dcp_single", key);
  const Checkpoint without = read_dcp_directory(kTorch2 + "dcp_single", {});
  ASSERT_EQ(with.tensors.size(), 6u);
  ASSERT_EQ(without.tensors.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(with.tensors[i].name, without.tensors[i].name);
  EXPECT_EQ(with.tensors[0].name, "lstm.weight_ih_l0");
  key.key = "optim";
  try {
    read_dcp_directory(kTorch2 + "dcp_single", key);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no key 'optim' in the checkpoint; keys: 'model'"), std::string::npos) << e.what();
  }
}

TEST(Dcp, OpenCheckpointTellsDirectoriesFromFiles) {
  const CheckpointInput dir = open_checkpoint(kTorch2 + "dcp_sharded");
  EXPECT_TRUE(dir.directory);
  EXPECT_EQ(dir.file, nullptr);
  EXPECT_EQ(dir.bytes(), 2764u + 13942u + 13750u);
  const CheckpointInput file = open_checkpoint(kTorch2 + "sn_param.pt");
  EXPECT_FALSE(file.directory);
  ASSERT_NE(file.file, nullptr);
  EXPECT_EQ(file.bytes(), 9316u);
}

// The bytes after STOP, or a metadata that is not one, are refused.
TEST(Dcp, MetadataRefusals) {
  std::vector<uint8_t> b = file_bytes(kTorch2 + "dcp_single/.metadata");
  b.push_back('.');
  try {
    parse_dcp_metadata(b.data(), b.size(), "x/.metadata");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x/.metadata: 1 bytes after the pickle's STOP"), std::string::npos) << e.what();
  }
  const uint8_t dict[] = {0x80, 0x04, '}', '.'};
  try {
    parse_dcp_metadata(dict, sizeof dict, "x/.metadata");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the root: is a dict, not a Metadata"), std::string::npos) << e.what();
  }
}

// Non-tensor values beside the model and inside it (tests/fixtures/
// dcp_values, make_dcp_fixtures.py, torch 2.15): each BytesStorageMetadata
// entry (NEWOBJ with no BUILD) is read, its byte range recorded, and listed
// as ignored; the model's tensors are read as from any DCP directory.
const std::string kValues = std::string(FERRY_FIXTURES_DIR) + "/dcp_values/";

TEST(Dcp, NonTensorEntriesAreReadAndIgnored) {
  for (const std::string dir : {"one_rank", "two_ranks"}) {
    const std::vector<uint8_t> b = file_bytes(kValues + dir + "/.metadata");
    const DcpMetadata md = parse_dcp_metadata(b.data(), b.size(), dir);
    size_t values = 0;
    for (const DcpEntry& e : md.entries) {
      if (e.is_tensor) continue;
      ++values;
      ASSERT_EQ(e.chunks.size(), 1u) << e.fqn;
      EXPECT_TRUE(e.chunks[0].offsets.empty()) << e.fqn;
      EXPECT_GT(e.chunks[0].length, 0u) << e.fqn;
    }
    EXPECT_EQ(values, 23u) << dir;
    EXPECT_EQ(entry(md, "step").path, (std::vector<std::string>{"step"}));
    EXPECT_EQ(entry(md, "config.schedule.warmup").path,
              (std::vector<std::string>{"config", "schedule", "warmup"}));
    EXPECT_EQ(entry(md, "history.1").path, (std::vector<std::string>{"history", "1"}));

    std::vector<DcpFile> files;
    const Checkpoint c = read_dcp_directory(kValues + dir, {}, &files);
    EXPECT_EQ(c.form.find("training checkpoint (key 'model')") != std::string::npos, true) << c.form;
    ASSERT_EQ(c.tensors.size(), 6u) << dir;
    EXPECT_EQ(c.tensors[0].name, "lstm.weight_ih_l0");
    auto reason = [&](const std::string& name) -> std::string {
      for (const auto& [n, r] : c.ignored)
        if (n == name) return r;
      return "(not listed)";
    };
    EXPECT_EQ(reason("head._extra_state.calibrated"), kDcpNonTensorReason);
    EXPECT_EQ(reason("step"), kDcpNonTensorReason);
    EXPECT_EQ(reason("run_name"), kDcpNonTensorReason);
    EXPECT_EQ(reason("best"), kDcpNonTensorReason);
    EXPECT_EQ(reason("config.tags"), std::string(kDcpNonTensorReason) + " (under key 'config')");
    EXPECT_EQ(reason("ema.decay"), std::string(kDcpNonTensorReason) + " (under key 'ema')");
    EXPECT_EQ(reason("ema.shadow.head.bias"), "not selected (under key 'ema')");
    EXPECT_EQ(reason("history.0"), "not selected (under key 'history')");
    EXPECT_EQ(c.ignored.size(), 25u) << dir;
    // The files holding the values are opened (their ranges checked).
    EXPECT_EQ(files.size(), dir == "one_rank" ? 2u : 3u);
  }
}

// A non-tensor entry is a field-less record: any state, or arguments, is
// refused; so is one whose bytes lie nowhere.
TEST(Dcp, NonTensorEntryRefusals) {
  const std::vector<uint8_t> good = file_bytes(kValues + "one_rank/.metadata");
  const std::string cls = "BytesStorageMetadata";
  auto with = [&](const std::string& after_newobj) {
    // The first BytesStorageMetadata's NEWOBJ (0x81) and its MEMOIZE (0x94).
    std::vector<uint8_t> b = good;
    auto at = std::search(b.begin(), b.end(), cls.begin(), cls.end());
    EXPECT_NE(at, b.end());
    const uint8_t newobj_memo[] = {0x29, 0x81, 0x94};
    auto n = std::search(at, b.end(), std::begin(newobj_memo), std::end(newobj_memo));
    EXPECT_NE(n, b.end());
    b.insert(n + 3, after_newobj.begin(), after_newobj.end());
    return b;
  };
  auto error_of = [](const std::vector<uint8_t>& b) -> std::string {
    try {
      parse_dcp_metadata(b.data(), b.size(), "x/.metadata");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  // BUILD({}) is what an empty __dict__ would give: accepted.
  EXPECT_EQ(error_of(with("}b")), "(no error)");
  // BUILD({'size': 3}): state a field-less class cannot have.
  std::string bytes = "}";
  bytes += '\x8c';
  bytes += '\x04';
  bytes += "sizeK";
  bytes += '\x03';
  bytes += "sb";
  const std::string msg = error_of(with(bytes));
  EXPECT_NE(msg.find("x/.metadata: state_dict_metadata['model.head._extra_state.calibrated']: BytesStorageMetadata has "
                     "state (a dict of 1 fields): the class has no fields"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
