// Protocol Buffers' wire format, the few pieces the CP-SAT model needs (private to src/exact):
// a writer for the messages optpipe sends and a reader for the one it gets back. CP-SAT's
// library carries its own protobuf runtime; writing the bytes here keeps a second one out of
// the process. Field numbers come from the wheel's own descriptors (scripts/fetch_ortools.sh
// keeps them in build/ortools/ortools.desc; the tests decode what this writes with protoc).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace optpipe::wire {

class Writer {
 public:
  void varint(int field, uint64_t v) {
    key(field, 0);
    raw_varint(v);
  }
  void int64(int field, int64_t v) { varint(field, static_cast<uint64_t>(v)); }  // int32 alike
  void dbl(int field, double v) {
    key(field, 1);
    char b[8];
    std::memcpy(b, &v, 8);  // little-endian, as the wire format is
    out_.append(b, 8);
  }
  void packed(int field, const std::vector<int64_t>& vs) {
    if (vs.empty()) return;
    Writer body;
    for (int64_t v : vs) body.raw_varint(static_cast<uint64_t>(v));
    bytes(field, body.out_);
  }
  void message(int field, const Writer& m) { bytes(field, m.out_); }
  void bytes(int field, const std::string& b) {
    key(field, 2);
    raw_varint(b.size());
    out_ += b;
  }
  const std::string& data() const { return out_; }

 private:
  void key(int field, int wire_type) { raw_varint(static_cast<uint64_t>(field) << 3 | wire_type); }
  void raw_varint(uint64_t v) {
    while (v > 0x7F) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

// Walks a message's fields in order. A malformed message stops the walk with ok() false.
class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  // The next field: its number and wire type; false at the end or on malformed input.
  bool next(int* field, int* wire_type) {
    if (p_ >= end_ || !ok_) return false;
    uint64_t k = 0;
    if (!raw_varint(&k)) return false;
    *field = static_cast<int>(k >> 3);
    *wire_type = static_cast<int>(k & 7);
    return true;
  }
  uint64_t varint() {
    uint64_t v = 0;
    raw_varint(&v);
    return v;
  }
  double dbl() {
    double v = 0;
    if (end_ - p_ < 8) return fail(), 0.0;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  // A length-delimited field's bytes.
  std::string bytes() {
    const uint64_t n = varint();
    if (!ok_ || n > static_cast<uint64_t>(end_ - p_)) return fail(), std::string();
    std::string out(p_, n);
    p_ += n;
    return out;
  }
  // A repeated integer field, packed (wire type 2) or one value (wire type 0).
  void int64s(int wire_type, std::vector<int64_t>* out) {
    if (wire_type == 0) {
      out->push_back(static_cast<int64_t>(varint()));
      return;
    }
    const std::string b = bytes();
    Reader r(b.data(), b.size());
    while (r.p_ < r.end_ && r.ok_) out->push_back(static_cast<int64_t>(r.varint()));
    ok_ = ok_ && r.ok_;
  }
  void skip(int wire_type) {
    if (wire_type == 0)
      varint();
    else if (wire_type == 1)
      dbl();
    else if (wire_type == 2)
      bytes();
    else if (wire_type == 5 && end_ - p_ >= 4)
      p_ += 4;
    else
      fail();
  }
  bool ok() const { return ok_; }

 private:
  void fail() { ok_ = false; }
  bool raw_varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return fail(), false;
      const auto b = static_cast<uint8_t>(*p_++);
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return fail(), false;
  }
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

}  // namespace optpipe::wire
