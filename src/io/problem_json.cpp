// Problems as JSON ("optpipe.problem/1"), read strictly and written with every field.
#include "io/json_reader.h"
#include "optpipe/json_io.h"

namespace optpipe {

using namespace json_read;

Result<Problem> problem_from_json(const std::string& text) {
  Result<json> parsed = parse(text, "problem");
  if (!parsed.ok()) return Result<Problem>::Error(parsed.status);
  return read_problem(parsed.value);
}

Result<Problem> json_read::read_problem(const json& j) {
  Status err;
  Problem p;
  Reader r(j, "", &err);
  check_format(r, kProblemFormat);
  r.integer("num_devices", &p.num_devices, true);
  r.integer("num_microbatches", &p.num_microbatches, true);
  read_placement(r, &p.placement, &p.chunks_per_device);
  r.number("t_comm_us", &p.t_comm_us, false);
  if (const json* stages = r.array("stages", true)) {
    for (size_t i = 0; i < stages->size() && err.ok(); i++) {
      Reader sr((*stages)[i], "stages[" + std::to_string(i) + "]", &err);
      StageSpec st;
      st.t_r_us = std::numeric_limits<double>::quiet_NaN();  // absent: a recompute costs a forward
      read_measured_stage(sr, &st, true);
      if (std::isnan(st.t_r_us)) st.t_r_us = st.t_f_us;
      sr.integer("act_b_bytes", &st.act_b_bytes, true);
      sr.integer("ws_f_bytes", &st.ws_f_bytes, false);
      sr.integer("ws_b_bytes", &st.ws_b_bytes, false);
      sr.integer("ws_w_bytes", &st.ws_w_bytes, false);
      sr.integer("num_layers", &st.num_layers, false);
      sr.integer("recompute_layers", &st.recompute_layers, false);
      sr.finish();
      p.stages.push_back(st);
    }
  }
  if (const json* devices = r.array("devices", true)) {
    for (size_t i = 0; i < devices->size() && err.ok(); i++) {
      Reader dr((*devices)[i], "devices[" + std::to_string(i) + "]", &err);
      DeviceSpec dev;
      dev.host_link = static_cast<int>(i);
      dr.integer("static_bytes", &dev.static_bytes, true);
      dr.integer("mem_budget_bytes", &dev.mem_budget_bytes, true);
      dr.integer("host_link", &dev.host_link, false);
      dr.finish();
      p.devices.push_back(dev);
    }
  }
  read_host_link(r, &p.host_link, &err);
  std::string partition = partition_rule_name(p.partition);
  r.string("partition", &partition, false);
  if (!parse_partition_rule(partition, &p.partition) && err.ok())
    err = Status::Invalid("partition: must be balanced, even or even-accounted, got " + partition);
  if (const json* layers = r.array("layers", false)) {
    for (size_t i = 0; i < layers->size() && err.ok(); i++) {
      Reader lr((*layers)[i], "layers[" + std::to_string(i) + "]", &err);
      LayerSpec l;
      std::string kind = "layer";
      lr.string("kind", &kind, false);
      if (kind == "embedding")
        l.kind = LayerKind::kEmbedding;
      else if (kind == "head")
        l.kind = LayerKind::kHead;
      else if (kind != "layer" && err.ok())
        err = Status::Invalid("layers[" + std::to_string(i) + "].kind: must be layer, embedding or head, got " + kind);
      lr.number("t_f_us", &l.t_f_us, true);
      lr.number("t_b_us", &l.t_b_us, true);
      lr.number("t_w_us", &l.t_w_us, true);
      lr.number("t_r_us", &l.t_r_us, true);
      lr.integer("act_f_bytes", &l.act_f_bytes, true);
      lr.integer("act_w_bytes", &l.act_w_bytes, true);
      lr.integer("act_input_bytes", &l.act_input_bytes, true);
      lr.integer("static_bytes", &l.static_bytes, true);
      lr.finish();
      p.layers.push_back(l);
    }
  }
  r.finish();
  if (err.ok()) err = check_problem(p);
  if (!err.ok()) return Result<Problem>::Error(err);
  return Result<Problem>::Of(std::move(p));
}

std::string problem_to_json(const Problem& p) {
  json j;
  j["format"] = kProblemFormat;
  j["num_devices"] = p.num_devices;
  j["num_microbatches"] = p.num_microbatches;
  j["placement"] = placement_name(p.placement);
  j["chunks_per_device"] = p.chunks_per_device;
  j["t_comm_us"] = p.t_comm_us;
  j["stages"] = json::array();
  for (const StageSpec& st : p.stages) {
    json s = measured_stage_json(st);
    s["act_b_bytes"] = st.act_b_bytes;
    s["ws_f_bytes"] = st.ws_f_bytes;
    s["ws_b_bytes"] = st.ws_b_bytes;
    s["ws_w_bytes"] = st.ws_w_bytes;
    s["num_layers"] = st.num_layers;
    s["recompute_layers"] = st.recompute_layers;
    j["stages"].push_back(s);
  }
  j["devices"] = json::array();
  for (const DeviceSpec& d : p.devices)
    j["devices"].push_back(
        {{"static_bytes", d.static_bytes}, {"mem_budget_bytes", d.mem_budget_bytes}, {"host_link", d.host_link}});
  j["host_link"] = host_link_json(p.host_link);
  if (p.partition != PartitionRule::kBalanced) j["partition"] = partition_rule_name(p.partition);
  if (!p.layers.empty()) {
    j["layers"] = json::array();
    for (const LayerSpec& l : p.layers)
      j["layers"].push_back({{"kind", layer_kind_name(l.kind)},
                             {"t_f_us", l.t_f_us},
                             {"t_b_us", l.t_b_us},
                             {"t_w_us", l.t_w_us},
                             {"t_r_us", l.t_r_us},
                             {"act_f_bytes", l.act_f_bytes},
                             {"act_w_bytes", l.act_w_bytes},
                             {"act_input_bytes", l.act_input_bytes},
                             {"static_bytes", l.static_bytes}});
  }
  return j.dump(2) + "\n";
}

}  // namespace optpipe
