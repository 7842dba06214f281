// A minimal streaming JSON writer for the simulator's and the benchmarks'
// reports: objects, arrays, strings, numbers, booleans; commas and escaping
// handled. Non-finite numbers are written as null. Not thread-safe.
#ifndef TANDEM_SCHED_SIM_JSON_WRITER_H_
#define TANDEM_SCHED_SIM_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::sched::sim {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next value inside an object.
  JsonWriter& Key(const std::string& key);
  JsonWriter& String(const std::string& value);
  JsonWriter& Number(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Bool(bool value);

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();
  void Quoted(const std::string& text);

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written yet
  bool after_key_ = false;
};

}  // namespace tandem::sched::sim

#endif  // TANDEM_SCHED_SIM_JSON_WRITER_H_
