#include "extender/handlers.h"

#include <chrono>
#include <exception>
#include <set>
#include <utility>

#include "common/strings.h"
#include "extender/convert.h"

namespace accelpool::extender {
namespace {

// Ok unless `pod` (its object `json`) asks for pooled devices under a
// scheduler name other than `ours` (none set: any name passes). The pod
// cache watches only `ours`'s pods, so the devices of another's would never
// be freed.
Status CheckSchedulerName(const Json& json, const PodInfo& pod, const std::string& ours) {
  if (!pod.Pooled() || ours.empty()) return Status::Ok();
  std::string name = "default-scheduler";  // what the apiserver defaults an empty name to
  if (auto spec = json.find("spec"); spec != json.end() && spec->is_object()) {
    if (auto n = spec->find("schedulerName");
        n != spec->end() && n->is_string() && !n->get_ref<const std::string&>().empty()) {
      name = n->get<std::string>();
    }
  }
  if (name == ours) return Status::Ok();
  auto Quote = [](const std::string& s) { return "\"" + s + "\""; };
  return FailedPreconditionError("pod " + pod.ref.ns + "/" + pod.ref.name +
                                 " asks for accelerators under scheduler " + Quote(name) +
                                 ", but accelpool places and tracks them only for pods of " +
                                 Quote(ours) + ": set spec.schedulerName to " + Quote(ours) +
                                 " (or leave it empty where the accelpool webhook is on)");
}

}  // namespace

Handlers::Handlers(Extender& ext, PodSource* pods, const ExtenderMetrics* metrics, Logger log,
                   HandlerOptions options)
    : ext_(ext), pods_(pods), metrics_(metrics), log_(std::move(log)), options_(options) {}

Reply Handlers::Run(std::string_view verb, std::string_view body,
                    const std::function<Reply(std::string_view)>& fn) {
  const auto start = std::chrono::steady_clock::now();
  Reply r;
  if (body.size() > options_.max_body_bytes) {
    r = BadRequest(verb, InvalidArgumentError("body of " + std::to_string(body.size()) +
                                              " bytes is over the limit of " +
                                              std::to_string(options_.max_body_bytes) +
                                              "; enable nodeCacheCapable so NodeNames are sent"));
  } else {
    try {
      r = fn(body);
    } catch (const std::exception& e) {
      log_.Error("handler failed", {{"verb", verb}, {"error", e.what()}});
      r = Reply{500, EncodeErrorBody(std::string("internal error: ") + e.what() +
                                     "; the request can be retried")};
    }
  }
  if (metrics_ != nullptr) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_->latency->WithLabels({std::string(verb)}).Observe(s);
    metrics_->requests->WithLabels({std::string(verb), std::to_string(r.status)}).Inc();
  }
  return r;
}

Reply Handlers::BadRequest(std::string_view verb, const Status& st) {
  log_.Warn("bad request", {{"verb", verb}, {"error", st.message()}});
  if (metrics_ != nullptr) {
    metrics_->bad_requests->WithLabels({std::string(verb)}).Inc();
  }
  return Reply{400, EncodeErrorBody(st.message())};
}

StatusOr<PodInfo> Handlers::PodFromArgs(const Json& pod) const {
  if (pod.is_null()) {
    return InvalidArgumentError(
        "the request has no Pod; kube-scheduler always sends one, check the extender "
        "configuration");
  }
  StatusOr<PodInfo> info = PodInfoFromJson(pod);
  if (!info.ok()) return info;
  if (Status st = CheckSchedulerName(pod, *info, options_.scheduler_name); !st.ok()) return st;
  return info;
}

Reply Handlers::Filter(std::string_view body) {
  return Run("filter", body, [&](std::string_view b) -> Reply {
    StatusOr<ExtenderArgs> args = DecodeExtenderArgs(b);
    if (!args.ok()) {
      return BadRequest("filter", args.status());
    }
    if (!args->unknown_keys.empty()) {
      log_.Debug("ignored unknown keys",
                 {{"verb", "filter"}, {"keys", StrJoin(args->unknown_keys, ",")}});
    }
    FilterResult out;
    if (!Synced()) {
      for (const std::string& n : args->CandidateNames()) {
        out.failed_nodes[n] = kNotSyncedReason;
      }
      if (args->nodes.has_value()) {
        out.nodes = std::vector<Json>();
      } else {
        out.node_names = std::vector<std::string>();
      }
      return Reply{200, EncodeFilterResult(out)};
    }
    StatusOr<PodInfo> pod = PodFromArgs(args->pod);
    if (!pod.ok()) {
      log_.Warn("filter refused", {{"error", pod.status().message()}});
      out.error = pod.status().message();
      return Reply{200, EncodeFilterResult(out)};
    }
    const std::vector<std::string> names = args->CandidateNames();
    FilterDecision d = ext_.Filter(*pod, names);
    out.failed_nodes = std::move(d.failed);
    out.failed_and_unresolvable = std::move(d.unresolvable);
    if (args->nodes.has_value()) {
      std::set<std::string> fits(d.fits.begin(), d.fits.end());
      out.nodes = std::vector<Json>();
      for (size_t i = 0; i < names.size(); ++i) {
        if (fits.count(names[i])) {
          out.nodes->push_back((*args->nodes)[i]);
        }
      }
    } else {
      out.node_names = std::move(d.fits);
    }
    return Reply{200, EncodeFilterResult(out)};
  });
}

Reply Handlers::Prioritize(std::string_view body) {
  return Run("prioritize", body, [&](std::string_view b) -> Reply {
    StatusOr<ExtenderArgs> args = DecodeExtenderArgs(b);
    if (!args.ok()) {
      return BadRequest("prioritize", args.status());
    }
    StatusOr<PodInfo> pod = PodFromArgs(args->pod);
    if (!pod.ok()) {
      return BadRequest("prioritize", pod.status());
    }
    if (!Synced()) {
      std::vector<HostPriority> zeros;
      for (const std::string& n : args->CandidateNames()) {
        zeros.push_back(HostPriority{n, 0});
      }
      return Reply{200, EncodeHostPriorityList(zeros)};
    }
    return Reply{200, EncodeHostPriorityList(ext_.Prioritize(*pod, args->CandidateNames()))};
  });
}

Reply Handlers::Bind(std::string_view body) {
  return Run("bind", body, [&](std::string_view b) -> Reply {
    StatusOr<BindingArgs> args = DecodeBindingArgs(b);
    if (!args.ok()) {
      return BadRequest("bind", args.status());
    }
    // Refused before planning: counted and logged as Bind's own failures
    // are, under `stage` ("gate": this replica may not bind now; "pod": the
    // pod to bind could not be had).
    const PodRef ref{args->pod_uid, args->pod_namespace, args->pod_name, ""};
    const std::string name = args->pod_namespace + "/" + args->pod_name;
    auto refuse = [&](std::string_view stage, const Status& why) {
      ext_.BindRefused(ref, args->node, stage, why);
      return Reply{200, EncodeBindingResult(why.message())};
    };
    if (!Synced()) {
      return refuse("gate", UnavailableError(kNotSyncedReason));
    }
    if (bind_gate_) {
      if (std::string why = bind_gate_(); !why.empty()) {
        return refuse("gate",
                      UnavailableError("this accelpool-extender replica is not the leader (" + why +
                                       "); kube-scheduler retries the pod"));
      }
    }
    std::optional<PodInfo> pod;
    if (!args->pod_uid.empty()) {
      pod = ext_.RememberedPod(args->pod_uid);
    }
    if (!pod.has_value()) {
      if (pods_ == nullptr) {
        return refuse("pod", FailedPreconditionError("pod " + name +
                                                     " was not filtered by this extender; retry"));
      }
      StatusOr<nlohmann::json> obj =
          pods_->GetPod(args->pod_namespace, args->pod_name, args->pod_uid);
      if (!obj.ok()) {
        return refuse("pod", obj.status().WithPrefix("pod " + name));
      }
      StatusOr<PodInfo> parsed = PodInfoFromJson(*obj);
      if (!parsed.ok()) {
        return refuse("pod", parsed.status());
      }
      // As filter, prioritize and preempt refuse it (PodFromArgs): a pod of
      // another scheduler name bound here would keep its devices for good.
      if (Status st = CheckSchedulerName(*obj, *parsed, options_.scheduler_name); !st.ok()) {
        return refuse("pod", st);
      }
      if (!args->pod_uid.empty() && parsed->ref.uid != args->pod_uid) {
        return refuse("pod",
                      AbortedError("pod " + name + " was re-created (uid changed); not binding"));
      }
      pod = std::move(parsed).value();
    }
    StatusOr<PodAssignment> a = ext_.Bind(*pod, args->node);
    return Reply{200, EncodeBindingResult(a.ok() ? "" : a.status().message())};
  });
}

Reply Handlers::Preempt(std::string_view body) {
  return Run("preempt", body, [&](std::string_view b) -> Reply {
    StatusOr<PreemptionArgs> args = DecodePreemptionArgs(b);
    if (!args.ok()) {
      return BadRequest("preempt", args.status());
    }
    StatusOr<PodInfo> pod = PodFromArgs(args->pod);
    if (!pod.ok()) {
      return BadRequest("preempt", pod.status());
    }
    if (!Synced()) {
      return Reply{503, EncodeErrorBody(kNotSyncedReason)};
    }
    return Reply{200, EncodePreemptionResult(ext_.Preempt(*pod, args->victims))};
  });
}

}  // namespace accelpool::extender
