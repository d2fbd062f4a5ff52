#include "taoquant/reference.h"

#include "taoquant/algorithms.h"
#include "taoquant/enums.h"
#include "taoquant/gates.h"
#include "taoquant/observer.h"
#include "taoquant/strings.h"

namespace tq {

namespace {

template <class E>
nlohmann::json values_json(const EnumTable<E>& t) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : t.entries)
    a.push_back({{"name", std::string(e.name)}, {"help", std::string(e.help)}});
  return a;
}

nlohmann::json gates_json() {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : gate_table()) {
    nlohmann::json where = nlohmann::json::array();
    if (d.uses & kEvaluateGate) where.push_back("evaluate.gates");
    if (d.uses & kTuneGate) where.push_back("quantize.tune");
    a.push_back({{"name", d.name},
                 {"op", d.at_most ? "<=" : ">="},
                 {"in", where},
                 {"needs_labels", d.needs_labels},
                 {"help", d.help}});
  }
  return a;
}

}  // namespace

nlohmann::json spec_reference_json() {
  nlohmann::json observers = nlohmann::json::array();
  for (const auto* o : ObserverRegistry::instance().list())
    observers.push_back({{"name", o->name}, {"help", o->help}, {"origin", o->origin}});
  nlohmann::json algorithms = nlohmann::json::array();
  for (const auto& d : algorithm_passes()) {
    nlohmann::json modes = nlohmann::json::array();
    for (Mode m : d.modes) modes.push_back(std::string(to_string(m)));
    algorithms.push_back(
        {{"key", std::string(d.key)}, {"modes", modes}, {"help", std::string(d.help)}});
  }
  return {{"observers", observers},
          {"algorithms", algorithms},
          {"gates", gates_json()},
          {"values",
           {{"mode", values_json(mode_table())},
            {"dtype", values_json(dtype_table())},
            {"granularity", values_json(granularity_table())},
            {"rounding", values_json(rounding_table())},
            {"layer_kind", values_json(layer_kind_table())}}}};
}

std::string format_spec_reference(const nlohmann::json& ref) {
  std::string out;
  auto line = [&](const std::string& name, const std::string& help) {
    if (help.empty()) return void(out += "  " + name + "\n");
    const size_t width = 24;
    out += "  " + name + (name.size() < width ? std::string(width - name.size(), ' ') : " ") +
           help + "\n";
  };
  out += "\nobservers (quantize.algorithm, observer_or_fake_quant):\n";
  for (const auto& o : ref["observers"])
    line(o["name"].get<std::string>(),
         o["help"].get<std::string>() +
             (o["origin"] == "built-in" ? "" : " [" + o["origin"].get<std::string>() + "]"));
  out += "\nalgorithms (quantize.<key>):\n";
  for (const auto& a : ref["algorithms"]) {
    std::vector<std::string> modes = a["modes"].get<std::vector<std::string>>();
    line(a["key"].get<std::string>(), "(" + join(modes) + ") " + a["help"].get<std::string>());
  }
  out += "\ngates (evaluate.gates, quantize.tune):\n";
  for (const auto& g : ref["gates"])
    line(g["name"].get<std::string>(), g["op"].get<std::string>() + " limit, in " +
                                           join(g["in"].get<std::vector<std::string>>()) + ": " +
                                           g["help"].get<std::string>());
  for (const char* what : {"mode", "dtype", "granularity", "rounding", "layer_kind"}) {
    out += "\n" + std::string(what) + " values:\n";
    for (const auto& v : ref["values"][what])
      line(v["name"].get<std::string>(), v["help"].get<std::string>());
  }
  return out;
}

}  // namespace tq
