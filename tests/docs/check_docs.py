#!/usr/bin/env python3
"""Checks that the documentation still describes the code it documents.

  check_docs.py --root DIR --extender BIN --device-plugin BIN --keys BIN --ctl BIN

Each check prints what disagrees, with the file to fix:

  metrics  every Prometheus family the sources register is a row of the
           metrics table in docs/operations.md, and every row names one
  flags    every flag a binary's --help lists is in its page
           (extender.md, device-plugin.md; accelpool-keys and kubectl-accelpool:
           operations.md)
  links    every relative link of the Markdown pages reaches a file, and its
           #anchor a heading of that file
  values   every chart value in values.yaml is in the chart's README (itself,
           a parent, or a <placeholder> row), and every README row is a value
  alerts   every alert of charts/accelpool/alerts/accelpool.rules.yaml is a row
           of the alerts table in docs/operations.md with the same expression
           (and every row an alert), names only registered metrics, and has a
           runbook that reaches a heading of docs/operations.md
  examples every pod in a YAML example of the Markdown pages and of examples/
           (a Pod, a workload's pod template, or a fragment: a container's
           `resources:`, a pod's `spec:`, a pod's `metadata:`) is admitted by
           the extender's admission webhook, which runs the pod parser
           (api::ParsePodRequest) and the webhook's own checks, and is routed
           to accelpool's scheduler (so it names a resource the webhook knows;
           a misspelt name would leave the pod to the default scheduler). The
           extender runs on a loopback port with a kubeconfig that reaches no
           apiserver: no node is known, so only the pod itself is judged

Exits 1 when any check finds something, 2 on bad arguments.
"""
import argparse
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

REGISTER = re.compile(r'Add(?:Counter|Gauge|Histogram)\w*\(\s*"(accelpool_[a-z0-9_]+)"')
TABLE_ROW = re.compile(r'^\| `(accelpool_[a-z0-9_]+)`', re.M)
FLAG = re.compile(r'(?<![\w-])--[a-z0-9][a-z0-9-]*')
LINK = re.compile(r'\]\(([^)\s]+)\)')
HEADING = re.compile(r'^#+\s+(.*)$', re.M)
FENCE = re.compile(r'```.*?```', re.S)


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def registered_metrics(root):
    registered = set()
    for path in glob.glob(os.path.join(root, 'src', '**', '*.cc'), recursive=True):
        rel = os.path.relpath(path, root)
        if rel.endswith('_test.cc') or '/testing/' in rel or '/fuzz/' in rel:
            continue
        registered.update(REGISTER.findall(read(path)))
    return registered


def check_metrics(root):
    registered = registered_metrics(root)
    rows = set(TABLE_ROW.findall(read(os.path.join(root, 'docs', 'operations.md'))))
    problems = []
    if len(registered) < 10:
        problems.append(f'only {len(registered)} metric families found in src/: the pattern is stale')
    for name in sorted(registered - rows):
        problems.append(f'docs/operations.md: metric {name} (registered in src/) has no row')
    for name in sorted(rows - registered):
        problems.append(f'docs/operations.md: metric {name} has a row but nothing registers it')
    return problems, f'{len(registered)} metric families'


def check_flags(root, binaries):
    problems, total = [], 0
    for binary, page in binaries:
        out = subprocess.run([binary, '--help'], capture_output=True, text=True, timeout=30)
        text = out.stdout + out.stderr
        flags = sorted(set(FLAG.findall(text)) - {'--help'})
        if not flags:
            problems.append(f'{binary} --help lists no flags (exit {out.returncode})')
            continue
        total += len(flags)
        doc = read(os.path.join(root, page))
        for flag in flags:
            if not re.search(re.escape(flag) + r'(?![\w-])', doc):
                problems.append(f'{page}: {os.path.basename(binary)} {flag} is not mentioned')
    return problems, f'{total} flags'


def anchor(heading):
    a = heading.strip().lower()
    a = re.sub(r'[^\w\- ]', '', a)
    return a.replace(' ', '-')


def check_links(root):
    pages = (glob.glob(os.path.join(root, 'docs', '**', '*.md'), recursive=True) +
             glob.glob(os.path.join(root, 'charts', '**', '*.md'), recursive=True) +
             glob.glob(os.path.join(root, 'deploy', '**', '*.md'), recursive=True) +
             [os.path.join(root, 'README.md')])
    anchors = {}
    problems, total = [], 0
    for page in pages:
        text = FENCE.sub('', read(page))
        for link in LINK.findall(text):
            if re.match(r'^[a-z]+:', link):
                continue
            total += 1
            path, _, frag = link.partition('#')
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            rel = os.path.relpath(page, root)
            if not os.path.exists(target):
                problems.append(f'{rel}: link {link} reaches no file')
                continue
            if frag and target.endswith('.md'):
                if target not in anchors:
                    anchors[target] = {anchor(h) for h in HEADING.findall(FENCE.sub('', read(target)))}
                if frag not in anchors[target]:
                    problems.append(f'{rel}: link {link}: no such heading')
    return problems, f'{total} links in {len(pages)} pages'


def leaves(values, prefix=''):
    for key, value in values.items():
        name = prefix + str(key)
        if isinstance(value, dict) and value:
            yield from leaves(value, name + '.')
        else:
            yield name


def check_values(root):
    chart = os.path.join(root, 'charts', 'accelpool')
    values = yaml.safe_load(read(os.path.join(chart, 'values.yaml')))
    readme = read(os.path.join(chart, 'README.md'))
    # A row's first cell names one value or several: | `a.b`, `a.c` | ...
    rows = [name for cell in re.findall(r'^\| (`[^|]+`) \|', readme, re.M)
            for name in re.findall(r'`([^`]+)`', cell)]
    # A row may stand for many keys: `devicePlugin.vendors.<vendor>.enabled`.
    patterns = [re.compile('^' + re.sub(r'<[^>]+>', r'[^.]+', re.escape(r).replace(r'\<', '<')
                                        .replace(r'\>', '>')) + r'(\..*)?$') for r in rows]
    problems, keys = [], list(leaves(values))
    for key in keys:
        if not any(p.match(key) for p in patterns):
            problems.append(f'charts/accelpool/README.md: value {key} has no row')
    for row in rows:
        parts = row.split('.')
        node, ok = values, True
        for part in parts:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, dict) and part.startswith('<') and node:
                node = next(iter(node.values()))
            else:
                ok = False
                break
        if not ok:
            problems.append(f'charts/accelpool/README.md: row {row} is not a value of values.yaml')
    return problems, f'{len(keys)} chart values, {len(rows)} rows'


ALERT_ROW = re.compile(r'^\| `(Accelpool\w+)` \| `(.+?)`(?: \([^)]*\))? \|', re.M)
METRIC = re.compile(r'\baccelpool_[a-z0-9_]+')


def one_line(expr):
    return re.sub(r'\s+', ' ', expr.replace('\\|', '|')).strip()


def check_alerts(root):
    rules = yaml.safe_load(read(os.path.join(root, 'charts', 'accelpool', 'alerts',
                                             'accelpool.rules.yaml')))
    alerts = {r['alert']: r for g in rules['groups'] for r in g['rules'] if 'alert' in r}
    page = read(os.path.join(root, 'docs', 'operations.md'))
    headings = {anchor(h) for h in HEADING.findall(FENCE.sub('', page))}
    rows = dict(ALERT_ROW.findall(page))
    registered = registered_metrics(root)
    problems = []
    for name, rule in alerts.items():
        if name not in rows:
            problems.append(f'docs/operations.md: alert {name} has no row in the alerts table')
        elif one_line(rows[name]) != one_line(rule['expr']):
            problems.append(f'docs/operations.md: alert {name}: the row\'s expression is not the '
                            f'rule\'s ({rule["expr"]})')
        for metric in METRIC.findall(rule['expr']):
            family = re.sub(r'_(bucket|sum|count)$', '', metric)
            if metric not in registered and family not in registered:
                problems.append(f'accelpool.rules.yaml: alert {name} names {metric}, which nothing '
                                f'registers')
        page_ref, _, frag = rule.get('annotations', {}).get('runbook', '').partition('#')
        if page_ref != 'docs/operations.md' or frag not in headings:
            problems.append(f'accelpool.rules.yaml: alert {name}: runbook '
                            f'{rule.get("annotations", {}).get("runbook")} is not a heading of '
                            f'docs/operations.md')
    for name in rows:
        if name not in alerts:
            problems.append(f'docs/operations.md: alert row {name} is not in accelpool.rules.yaml')
    return problems, f'{len(alerts)} alerts, {len(rows)} rows'


YAML_FENCE = re.compile(r'^```ya?ml\n(.*?)^```', re.S | re.M)


def example_pods(doc):
    """The pods a YAML example stands for, as (what, pod) pairs."""
    if not isinstance(doc, dict):
        return []
    if 'kind' not in doc:
        # Fragments: a container's resources, a pod's spec, a pod's metadata.
        if 'resources' in doc:
            return [('container fragment', {'spec': {'containers': [dict(doc, name='main')]}})]
        if isinstance(doc.get('spec'), dict) and 'containers' in doc['spec']:
            return [('pod spec fragment', {'metadata': doc.get('metadata', {}), 'spec': doc['spec']})]
        if set(doc) == {'metadata'}:
            container = {'name': 'main', 'resources': {'limits': {'nvidia.com/gpu': 1}}}
            return [('pod metadata fragment', {'metadata': doc['metadata'],
                                               'spec': {'containers': [container]}})]
        return []
    pods = []

    def walk(node, path):
        if isinstance(node, dict):
            spec = node.get('spec')
            if isinstance(spec, dict) and isinstance(spec.get('containers'), list):
                pods.append((f'{doc["kind"]} {path or "."}',
                             {'metadata': node.get('metadata') or {}, 'spec': spec}))
                return
            for key, value in node.items():
                walk(value, f'{path}.{key}')
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f'{path}[{i}]')

    walk(doc, '')
    return pods


def example_sources(root):
    """(file, line, YAML text) of every YAML example."""
    pages = (glob.glob(os.path.join(root, 'docs', '**', '*.md'), recursive=True) +
             [os.path.join(root, 'README.md')])
    for page in sorted(pages):
        text = read(page)
        for m in YAML_FENCE.finditer(text):
            yield os.path.relpath(page, root), text.count('\n', 0, m.start(1)) + 1, m.group(1)
    for path in sorted(glob.glob(os.path.join(root, 'examples', '**', '*.yaml'), recursive=True)):
        yield os.path.relpath(path, root), 1, read(path)


def as_apiserver_sends(pod):
    """Quantities as strings, as kube-apiserver sends them (YAML 1 -> "1")."""
    for group in ('initContainers', 'containers'):
        for c in pod['spec'].get(group) or []:
            for section in ('limits', 'requests'):
                values = (c.get('resources') or {}).get(section) or {}
                for name, value in values.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        values[name] = str(value)


def start_extender(extender, workdir):
    """Starts the extender on a loopback port; returns (process, port)."""
    with socket.socket() as s:  # a port nothing listens on: every apiserver call fails at once
        s.bind(('127.0.0.1', 0))
        dead = s.getsockname()[1]
    kubeconfig = os.path.join(workdir, 'kubeconfig')
    with open(kubeconfig, 'w', encoding='utf-8') as f:
        f.write(f'''apiVersion: v1
kind: Config
clusters: [{{name: none, cluster: {{server: "http://127.0.0.1:{dead}"}}}}]
users: [{{name: none, user: {{token: none}}}}]
contexts: [{{name: none, context: {{cluster: none, user: none}}}}]
current-context: none
''')
    log_path = os.path.join(workdir, 'extender.log')
    log = open(log_path, 'w', encoding='utf-8')
    # Every namespace may ask for high task priority: an example pod that does
    # shows a namespace the platform granted it (devicePlugin.priority.highPriorityNamespaces).
    proc = subprocess.Popen([extender, f'--kubeconfig={kubeconfig}', '--listen=127.0.0.1:0',
                             '--learn-workload=false', '--host-aware=false',
                             '--high-priority-namespaces=*'],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        for line in read(log_path).splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get('msg') == 'serving' and entry.get('port'):
                return proc, entry['port']
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f'the extender did not start serving: {read(log_path)[-2000:]}')


def admit(port, pod):
    review = {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
              'request': {'uid': 'docs', 'operation': 'CREATE',
                          'kind': {'group': '', 'version': 'v1', 'kind': 'Pod'}, 'object': pod}}
    req = urllib.request.Request(f'http://127.0.0.1:{port}/mutate', data=json.dumps(review).encode(),
                                 headers={'Content-Type': 'application/json'}, method='POST')
    with urllib.request.urlopen(req, timeout=10) as r:
        response = json.load(r)['response']
    # A pod the webhook routes carries a patch (spec.schedulerName at least); one it
    # lets through untouched names no accelerator resource it knows.
    return (response.get('allowed') is True, 'patch' in response,
            response.get('status', {}).get('message', ''))


def check_examples(root, extender):
    examples = []
    problems = []
    for rel, line, text in example_sources(root):
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as e:
            if rel.startswith('examples'):
                problems.append(f'{rel}: does not parse as YAML: {e}')
            continue  # a page's YAML may hold placeholders; only pods are checked
        for n, doc in enumerate(docs):
            where = f'{rel}:{line}' + (f' (document {n + 1})' if len(docs) > 1 else '')
            for what, pod in example_pods(doc):
                pod = json.loads(json.dumps(pod))
                pod['metadata'] = pod.get('metadata') or {}
                pod['metadata'].setdefault('name', 'example')
                pod['metadata'].setdefault('namespace', 'default')
                as_apiserver_sends(pod)
                examples.append((where, what, pod))
    if len(examples) < 15:
        problems.append(f'only {len(examples)} pod examples found: the extraction is stale')
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = start_extender(extender, workdir)
        try:
            for where, what, pod in examples:
                pod['spec'].pop('schedulerName', None)  # so that a routed pod is patched
                allowed, routed, message = admit(port, pod)
                if not allowed:
                    problems.append(f'{where}: the example ({what}) is refused: {message}')
                elif not routed:
                    problems.append(f'{where}: the example ({what}) names no accelerator resource '
                                    f'the webhook knows (a misspelt name?)')
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return problems, f'{len(examples)} pod examples'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', required=True)
    ap.add_argument('--extender', required=True)
    ap.add_argument('--device-plugin', required=True)
    ap.add_argument('--keys', required=True)
    ap.add_argument('--ctl', required=True)
    args = ap.parse_args()
    binaries = [(args.extender, 'docs/extender.md'),
                (args.device_plugin, 'docs/device-plugin.md'),
                (args.keys, 'docs/operations.md'),
                (args.ctl, 'docs/operations.md')]
    failed = False
    for name, run in (('metrics', lambda: check_metrics(args.root)),
                      ('flags', lambda: check_flags(args.root, binaries)),
                      ('links', lambda: check_links(args.root)),
                      ('values', lambda: check_values(args.root)),
                      ('alerts', lambda: check_alerts(args.root)),
                      ('examples', lambda: check_examples(args.root, args.extender))):
        problems, what = run()
        print(f'{name}: {what}: ' + ('ok' if not problems else f'{len(problems)} problems'))
        for p in problems:
            print('  ' + p)
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
