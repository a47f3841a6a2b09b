#!/usr/bin/env python3
"""Security properties of a rendered accelpool chart (helm template output), checked as objects.

Usage: chart_security.py CHECK RENDERED.yaml [ARG]
  shim-only-nvidia      only a plugin whose backend is nvidia mounts the CUDA library, the preload
                        file's directory and the state root and takes their flags; the others run
                        --no-enforcement with none of them
  plugins               every device plugin (and init container): read-only root filesystem, /tmp
                        an emptyDir, pod seccomp RuntimeDefault, root, privileged (the default);
                        a shim plugin caps its state dirs (--state-dir-size-mib=4) and mounts the
                        state root with mountPropagation Bidirectional, and no mount of any
                        plugin propagates otherwise
  plugins-unprivileged  the nvidia and ascend plugins rendered with privileged=false: not
                        privileged, no escalation, ALL capabilities dropped, only DAC_OVERRIDE
                        added and only where the shim's state dirs are (nvidia), and no
                        NVIDIA_MIG_MONITOR_DEVICES (the NVIDIA runtime refuses it unprivileged);
                        no mount propagation (refused unprivileged) and --state-dir-size-mib=0
  scheduler REPLICAS    the scheduler pod meets Pod Security "restricted" by construction, has
                        resources, its token by opt-in; PDB, anti-affinity and zone spread only
                        with REPLICAS > 1; the certgen Jobs and rotation CronJob run non-root
                        with read-only roots; every ServiceAccount has automount off
  rbac                  no Role or ClusterRole rule has a wildcard, and no rule reads Secrets
                        (get, list, watch) without naming them
  ca-bundle-guard RELEASE NAMESPACE
                        the webhook-ca policy and its Deny binding: UPDATE of the chart's
                        MutatingWebhookConfiguration only, by the scheduler's and the certgen
                        hook's service accounts only (the two granted patch on it), comparing
                        every field of each webhook but clientConfig.caBundle, and the metadata;
                        "absent" as the third argument: no such policy is rendered
  env-guard RELEASE NAMESPACE SOURCE [EXEMPT,...]
                        the device-env policy and its Deny binding: pods and
                        pods/ephemeralcontainers, CREATE and UPDATE, no selector a pod author could
                        dodge, exempting exactly EXEMPT (default the GPU Operator's
                        gpu-operator, nvidia-gpu-operator), kube-system and the release
                        namespace; its lists of names and prefixes are those of
                        api::DeviceControlledEnv in SOURCE (src/api/resources.cc), which the
                        webhook refuses; "absent" as SOURCE: no such policy is rendered
Prints what is wrong and exits 1; needs PyYAML.
"""
import sys

import yaml

SHIM_PATHS = ("/var/lib/accelpool/containers", "/usr/local/accelpool/lib", "/usr/local/accelpool")
SHIM_FLAGS = ("--state-root=", "--state-dir-size-mib=", "--cuda-library=", "--preload-file=")


def docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def kind(objs, k):
    return [o for o in objs if o.get("kind") == k]


def plugin_sets(objs):
    return {d["metadata"]["labels"]["accelpool.io/vendor"]: d for d in kind(objs, "DaemonSet")}


def pod_spec(o):
    if o["kind"] == "CronJob":
        return o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return o["spec"]["template"]["spec"]


def container(spec, name):
    return next(c for c in spec.get("containers", []) + spec.get("initContainers", []) if c["name"] == name)


def host_paths(spec):
    return {v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}


def check_shim_only_nvidia(objs, errs):
    sets = plugin_sets(objs)
    if len(sets) < 2 or "nvidia" not in sets:
        errs.append(f"want the nvidia plugin and others, got {sorted(sets)}")
        return
    for vendor, ds in sets.items():
        spec = pod_spec(ds)
        c = container(spec, "device-plugin")
        backend = next(a for a in c["command"] if a.startswith("--backend=")).split("=", 1)[1]
        flags = [a for a in c["command"] if a.startswith(SHIM_FLAGS)]
        paths = host_paths(spec) & set(SHIM_PATHS)
        mounts = {m["mountPath"] for m in c["volumeMounts"]} & set(SHIM_PATHS)
        if backend == "nvidia":
            if len(flags) != len(SHIM_FLAGS) or paths != set(SHIM_PATHS) or mounts != set(SHIM_PATHS):
                errs.append(f"{vendor}: flags {flags}, host paths {paths}, mounts {mounts}")
            if "--no-enforcement" in c["command"]:
                errs.append(f"{vendor}: --no-enforcement")
        else:
            if flags or paths or mounts or "--no-enforcement" not in c["command"]:
                errs.append(f"{vendor} (backend {backend}): flags {flags}, host paths {paths}, "
                            f"mounts {mounts}, --no-enforcement {'--no-enforcement' in c['command']}")
            if spec.get("initContainers"):
                errs.append(f"{vendor}: init containers {[i['name'] for i in spec['initContainers']]}")


def check_plugin_basics(vendor, spec, errs):
    if spec.get("securityContext", {}).get("seccompProfile", {}).get("type") != "RuntimeDefault":
        errs.append(f"{vendor}: pod seccompProfile is not RuntimeDefault")
    if spec.get("automountServiceAccountToken") is not True:
        errs.append(f"{vendor}: automountServiceAccountToken is not true")
    tmp = [v for v in spec["volumes"] if v["name"] == "tmp"]
    if not tmp or "emptyDir" not in tmp[0]:
        errs.append(f"{vendor}: no emptyDir volume tmp")
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        if sc.get("readOnlyRootFilesystem") is not True:
            errs.append(f"{vendor}/{c['name']}: root filesystem not read-only")
        if sc.get("runAsUser") != 0:
            errs.append(f"{vendor}/{c['name']}: runAsUser {sc.get('runAsUser')}, want 0")
    c = container(spec, "device-plugin")
    if {"name": "tmp", "mountPath": "/tmp"} not in c["volumeMounts"]:
        errs.append(f"{vendor}: /tmp is not the tmp emptyDir")
    for i in spec.get("initContainers", []):
        sc = i["securityContext"]
        if sc.get("privileged") or sc.get("allowPrivilegeEscalation") is not False or \
                sc.get("capabilities") != {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}:
            errs.append(f"{vendor}/{i['name']}: securityContext {sc}")


def state_dir_cap(vendor, c, want_size, want_propagation, errs):
    """The state dirs' tmpfs cap of a plugin: its flag and the state root's mount propagation
    (only a shim plugin has either; no other mount of a plugin propagates)."""
    sizes = [a.split("=", 1)[1] for a in c["command"] if a.startswith("--state-dir-size-mib=")]
    shim = any(a.startswith("--state-root=") for a in c["command"])
    if shim and sizes != [want_size]:
        errs.append(f"{vendor}: --state-dir-size-mib {sizes}, want {want_size}")
    if not shim and sizes:
        errs.append(f"{vendor}: --state-dir-size-mib {sizes} without state dirs")
    for m in c["volumeMounts"]:
        want = want_propagation if shim and m["name"] == "state-root" else None
        if m.get("mountPropagation") != want:
            errs.append(f"{vendor}: mount {m['name']} mountPropagation {m.get('mountPropagation')}, want {want}")


def check_plugins(objs, errs):
    sets = plugin_sets(objs)
    if not sets:
        errs.append("no device plugin DaemonSet")
    for vendor, ds in sets.items():
        spec = pod_spec(ds)
        check_plugin_basics(vendor, spec, errs)
        c = container(spec, "device-plugin")
        sc = c["securityContext"]
        if sc.get("privileged") is not True:
            errs.append(f"{vendor}: not privileged by default: {sc}")
        state_dir_cap(vendor, c, "4", "Bidirectional", errs)


def check_plugins_unprivileged(objs, errs):
    sets = plugin_sets(objs)
    for vendor in ("nvidia", "ascend"):
        spec = pod_spec(sets[vendor])
        check_plugin_basics(vendor, spec, errs)
        c = container(spec, "device-plugin")
        sc = c["securityContext"]
        want_caps = {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]} if vendor == "nvidia" else {"drop": ["ALL"]}
        if sc.get("privileged") is not False or sc.get("allowPrivilegeEscalation") is not False or \
                sc.get("capabilities") != want_caps:
            errs.append(f"{vendor}: securityContext {sc}, want capabilities {want_caps}")
        state_dir_cap(vendor, c, "0", None, errs)
        env = {e["name"] for e in c.get("env", [])}
        if vendor == "nvidia" and ("NVIDIA_MIG_MONITOR_DEVICES" in env or "NVIDIA_VISIBLE_DEVICES" not in env):
            errs.append(f"nvidia: env {sorted(env)}")
    for vendor, ds in sets.items():
        if vendor in ("nvidia", "ascend"):
            continue
        if container(pod_spec(ds), "device-plugin")["securityContext"].get("privileged") is not True:
            errs.append(f"{vendor}: privileged changed though only nvidia and ascend were set")


def restricted_container(where, c, errs):
    sc = c.get("securityContext", {})
    if sc.get("allowPrivilegeEscalation") is not False:
        errs.append(f"{where}: allowPrivilegeEscalation is not false")
    if sc.get("readOnlyRootFilesystem") is not True:
        errs.append(f"{where}: root filesystem not read-only")
    if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("capabilities", {}).get("add"):
        errs.append(f"{where}: capabilities {sc.get('capabilities')}")
    if sc.get("privileged"):
        errs.append(f"{where}: privileged")


def restricted_pod(where, spec, errs):
    psc = spec.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True or not psc.get("runAsUser"):
        errs.append(f"{where}: runAsNonRoot {psc.get('runAsNonRoot')}, runAsUser {psc.get('runAsUser')}")
    if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        errs.append(f"{where}: seccompProfile {psc.get('seccompProfile')}")
    if spec.get("automountServiceAccountToken") is not True:
        errs.append(f"{where}: automountServiceAccountToken is not true (its account's is off)")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        errs.append(f"{where}: host namespaces")
    if host_paths(spec):
        errs.append(f"{where}: host paths {host_paths(spec)}")
    for c in spec["containers"] + spec.get("initContainers", []):
        restricted_container(f"{where}/{c['name']}", c, errs)


def check_scheduler(objs, errs, replicas):
    deps = kind(objs, "Deployment")
    if len(deps) != 1:
        errs.append(f"{len(deps)} Deployments")
        return
    spec = pod_spec(deps[0])
    restricted_pod("scheduler", spec, errs)
    for c in spec["containers"]:
        res = c.get("resources", {})
        if not res.get("requests", {}).get("cpu") or not res.get("requests", {}).get("memory") or \
                not res.get("limits", {}).get("memory"):
            errs.append(f"scheduler/{c['name']}: resources {res}")
    if spec.get("priorityClassName") != "system-cluster-critical":
        errs.append(f"scheduler: priorityClassName {spec.get('priorityClassName')}")
    pdbs = kind(objs, "PodDisruptionBudget")
    anti = spec.get("affinity", {}).get("podAntiAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    spread = spec.get("topologySpreadConstraints", [])
    if replicas > 1:
        if len(pdbs) != 1 or pdbs[0]["spec"].get("maxUnavailable") != 1:
            errs.append(f"{replicas} replicas: PDBs {[p['spec'] for p in pdbs]}")
        if not anti or anti[0]["podAffinityTerm"]["topologyKey"] != "kubernetes.io/hostname":
            errs.append(f"{replicas} replicas: anti-affinity {anti}")
        if [(t["topologyKey"], t["whenUnsatisfiable"], t["maxSkew"]) for t in spread] != \
                [("topology.kubernetes.io/zone", "ScheduleAnyway", 1)]:
            errs.append(f"{replicas} replicas: topologySpreadConstraints {spread}")
        sel = spread and spread[0]["labelSelector"]["matchLabels"]
        if sel and sel.get("app.kubernetes.io/component") != "scheduler":
            errs.append(f"spread selector {sel}")
    elif pdbs or anti or spread:
        errs.append(f"one replica: PDBs {len(pdbs)}, anti-affinity {anti}, spread {spread}")
    for job in kind(objs, "Job") + kind(objs, "CronJob"):
        restricted_pod(f"{job['kind']} {job['metadata']['name']}", pod_spec(job), errs)
        for c in pod_spec(job)["containers"]:
            res = c.get("resources", {})
            if not res.get("requests", {}).get("memory") or not res.get("limits", {}).get("memory"):
                errs.append(f"{job['metadata']['name']}/{c['name']}: resources {res}")
    for sa in kind(objs, "ServiceAccount"):
        if sa.get("automountServiceAccountToken") is not False:
            errs.append(f"ServiceAccount {sa['metadata']['name']}: automountServiceAccountToken is not false")
    for ds in kind(objs, "DaemonSet"):
        if pod_spec(ds).get("automountServiceAccountToken") is not True:
            errs.append(f"DaemonSet {ds['metadata']['name']}: automountServiceAccountToken is not true")


def check_rbac(objs, errs):
    roles = kind(objs, "Role") + kind(objs, "ClusterRole")
    if not roles:
        errs.append("no Role or ClusterRole")
    for r in roles:
        where = f"{r['kind']} {r['metadata']['name']}"
        for rule in r.get("rules", []):
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                if "*" in rule.get(field, []):
                    errs.append(f"{where}: wildcard in {field}: {rule}")
            reads = {"get", "list", "watch"} & set(rule.get("verbs", []))
            if "secrets" in rule.get("resources", []) and reads and not rule.get("resourceNames"):
                errs.append(f"{where}: reads every Secret: {rule}")


def policy_and_binding(objs, name, errs):
    """The ValidatingAdmissionPolicy NAME and its binding (Deny, no paramRef, no matchResources)."""
    pols = [p for p in kind(objs, "ValidatingAdmissionPolicy") if p["metadata"]["name"] == name]
    binds = [b for b in kind(objs, "ValidatingAdmissionPolicyBinding") if b["spec"]["policyName"] == name]
    if len(pols) != 1 or len(binds) != 1:
        errs.append(f"policy {name}: {len(pols)} policies, {len(binds)} bindings")
        return None
    b = binds[0]["spec"]
    if b.get("validationActions") != ["Deny"] or "matchResources" in b or "paramRef" in b:
        errs.append(f"binding of {name}: {b}")
    if pols[0]["spec"].get("failurePolicy") != "Fail":
        errs.append(f"policy {name}: failurePolicy {pols[0]['spec'].get('failurePolicy')}")
    return pols[0]["spec"]


WEBHOOK_FIELDS = ("rules", "namespaceSelector", "objectSelector", "matchConditions", "failurePolicy",
                  "sideEffects", "timeoutSeconds", "admissionReviewVersions", "reinvocationPolicy",
                  "matchPolicy", "clientConfig.service", "clientConfig.url")


def check_ca_bundle_guard(objs, errs, release, namespace, absent=False):
    name = f"{release}-accelpool-webhook-ca"
    if absent:
        if kind(objs, "ValidatingAdmissionPolicy") and any(
                p["metadata"]["name"] == name for p in kind(objs, "ValidatingAdmissionPolicy")):
            errs.append(f"policy {name} rendered")
        return
    spec = policy_and_binding(objs, name, errs)
    if spec is None:
        return
    hook = f"{release}-accelpool-webhook"
    if [h["metadata"]["name"] for h in kind(objs, "MutatingWebhookConfiguration")] != [hook]:
        errs.append(f"want one MutatingWebhookConfiguration {hook}")
    rules = spec["matchConstraints"]["resourceRules"]
    want = [{"apiGroups": ["admissionregistration.k8s.io"], "apiVersions": ["v1"],
             "operations": ["UPDATE"], "resources": ["mutatingwebhookconfigurations"],
             "resourceNames": [hook]}]
    if rules != want:
        errs.append(f"policy {name}: resourceRules {rules}, want {want}")
    cond = " ".join(c["expression"] for c in spec.get("matchConditions", []))
    writers = [f"system:serviceaccount:{namespace}:{release}-accelpool-scheduler",
               f"system:serviceaccount:{namespace}:{release}-accelpool-certgen"]
    for w in writers:
        if f'"{w}"' not in cond:
            errs.append(f"policy {name}: matchConditions do not name {w}: {cond}")
    # The writers are exactly the service accounts RBAC lets patch the webhook configuration.
    patchers = set()
    for r in kind(objs, "ClusterRole"):
        for rule in r.get("rules", []):
            if "mutatingwebhookconfigurations" in rule.get("resources", []) and "patch" in rule.get("verbs", []):
                patchers.add(r["metadata"]["name"])
    bound = set()
    for b in kind(objs, "ClusterRoleBinding"):
        if b["roleRef"]["name"] in patchers:
            bound |= {f"system:serviceaccount:{s['namespace']}:{s['name']}" for s in b["subjects"]}
    if not bound or not bound <= set(writers):
        errs.append(f"policy {name}: RBAC lets {sorted(bound)} patch the webhook, the policy holds {writers}")
    text = " ".join(v["expression"] for v in spec["validations"])
    for f in WEBHOOK_FIELDS:
        if f"w.{f} == o.{f}" not in text or f"has(w.{f}) == has(o.{f})" not in text:
            errs.append(f"policy {name}: webhooks' {f} not compared")
    if "caBundle" in text:
        errs.append(f"policy {name}: compares the caBundle")
    for f in ("labels", "annotations", "finalizers", "ownerReferences"):
        if f"object.metadata.{f} == oldObject.metadata.{f}" not in text:
            errs.append(f"policy {name}: metadata.{f} not compared")
    if "variables.hooks == variables.oldHooks" not in text:
        errs.append(f"policy {name}: the webhooks' names and order not compared")


def controlled_env_in_source(path, errs):
    """(names, prefixes) of api::DeviceControlledEnv: its static string_view arrays, as C++ has
    them. kEnforcementPrefixes holds prefixes; kEnforcement and kDeviceSelection whole names. An
    array of another name fails the check, so that a new one is sorted here on purpose."""
    import re
    with open(path, encoding="utf-8") as f:
        src = f.read()
    m = re.search(r"DeviceControlledEnv\(std::string_view name\) \{(.*?)\n\}", src, re.S)
    if not m:
        errs.append(f"{path}: no DeviceControlledEnv(std::string_view name)")
        return set(), set()
    arrays = {n: re.findall(r'"([^"]*)"', body) for n, body in
              re.findall(r"static constexpr std::string_view (\w+)\[\] = \{(.*?)\};", m.group(1), re.S)}
    known = {"kEnforcementPrefixes", "kEnforcement", "kDeviceSelection"}
    if set(arrays) != known:
        errs.append(f"{path}: DeviceControlledEnv's arrays are {sorted(arrays)}, this check knows {sorted(known)}")
    names = set(arrays.get("kEnforcement", [])) | set(arrays.get("kDeviceSelection", []))
    return names, set(arrays.get("kEnforcementPrefixes", []))


def check_env_guard(objs, errs, release, namespace, source, exempt=None):
    import json
    name = f"{release}-accelpool-device-env"
    if source == "absent":
        if any(p["metadata"]["name"] == name for p in kind(objs, "ValidatingAdmissionPolicy")):
            errs.append(f"policy {name} rendered")
        return
    spec = policy_and_binding(objs, name, errs)
    if spec is None:
        return
    mc = spec["matchConstraints"]
    want = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
             "resources": ["pods", "pods/ephemeralcontainers"]}]
    if mc.get("resourceRules") != want:
        errs.append(f"policy {name}: resourceRules {mc.get('resourceRules')}, want {want}")
    if mc.get("objectSelector") or mc.get("namespaceSelector"):
        errs.append(f"policy {name}: selectors in matchConstraints: {mc}")
    conds = spec.get("matchConditions", [])
    # kube-system and the release namespace always; EXEMPT, else the chart's default list.
    want_ns = sorted(set((exempt or "gpu-operator,nvidia-gpu-operator").split(","))
                     | {namespace, "kube-system"})
    if len(conds) != 1:
        errs.append(f"policy {name}: matchConditions {conds}")
    else:
        import re
        m = re.fullmatch(r"!\(request\.namespace in (\[.*\])\)", conds[0]["expression"])
        got = sorted(json.loads(m.group(1))) if m else None
        if got != want_ns:
            errs.append(f"policy {name}: exempt namespaces {got} ({conds[0]['expression']}), want {want_ns}")
    var = {v["name"]: v["expression"] for v in spec.get("variables", [])}
    names, prefixes = controlled_env_in_source(source, errs)
    got_names, got_prefixes = set(json.loads(var.get("names", "[]"))), set(json.loads(var.get("prefixes", "[]")))
    if got_names != names or len(got_names) != len(json.loads(var.get("names", "[]"))):
        errs.append(f"policy {name}: names differ from {source}: only in the chart "
                    f"{sorted(got_names - names)}, only in the source {sorted(names - got_names)}")
    if got_prefixes != prefixes:
        errs.append(f"policy {name}: prefixes differ from {source}: only in the chart "
                    f"{sorted(got_prefixes - prefixes)}, only in the source {sorted(prefixes - got_prefixes)}")
    for kinds in ("containers", "initContainers", "ephemeralContainers"):
        if f"object.spec.{kinds}.filter(" not in var.get(kinds, ""):
            errs.append(f"policy {name}: {kinds} not checked")
    if var.get("offending") != "variables.containers + variables.initContainers + variables.ephemeralContainers":
        errs.append(f"policy {name}: offending = {var.get('offending')}")
    if [v["expression"] for v in spec["validations"]] != ["size(variables.offending) == 0"]:
        errs.append(f"policy {name}: validations {spec['validations']}")


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    what, objs, errs = argv[1], docs(argv[2]), []
    if what == "shim-only-nvidia":
        check_shim_only_nvidia(objs, errs)
    elif what == "plugins":
        check_plugins(objs, errs)
    elif what == "plugins-unprivileged":
        check_plugins_unprivileged(objs, errs)
    elif what == "rbac":
        check_rbac(objs, errs)
    elif what == "ca-bundle-guard":
        check_ca_bundle_guard(objs, errs, argv[3], argv[4], len(argv) > 5 and argv[5] == "absent")
    elif what == "env-guard":
        check_env_guard(objs, errs, argv[3], argv[4], argv[5], argv[6] if len(argv) > 6 else None)
    elif what == "scheduler":
        check_scheduler(objs, errs, int(argv[3]))
    else:
        sys.stderr.write(__doc__)
        return 2
    for e in errs:
        print(e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
