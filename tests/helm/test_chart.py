"""helm/deltakv: the rendered manifests against the Kubernetes API schemas (kubernetes-validate,
offline), the values files against values.schema.json, and the pod against the sidecar itself:
its flags (cmd_sidecar.cc and sidecar_config.cc, or `deltakv sidecar --help` when a build is there) and its HTTP
routes (http_api.cc).

Run through scripts/test-helm.sh, which makes the pinned virtual environment."""
from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import subprocess
import sys

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import render  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((render.CHART_DIR / "values.schema.json").read_text())
KUBE_VERSION = "1.30"

# The least a user must give on top of the chart's defaults.
REQUIRED = {
    "token": {"value": "test-token"},
    "engine": {"image": {"repository": "registry.example.com/engine"}},
    "sidecar": {"image": {"repository": "registry.example.com/deltakv"}},
}
# Most of the chart's optional values at once, so that lint, the Kubernetes schemas and the
# sidecar's own parser see them.
EVERYTHING = render.merge_values(REQUIRED, {
    "podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
    "state": {"existingClaim": "deltakv-state"},
    "terminationGracePeriodSeconds": 150,
    "sidecar": {"servingCores": "0-15,32-47", "decoder": "walker", "decodeThreads": 2,
                "logFormat": "json", "shutdownTimeoutSeconds": 120,
                "volumeStore": "s3://volumes.example.com/deltakv",
                "env": [{"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {
                    "name": "volume-store", "key": "access-key-id"}}}],
                "extraArgs": ["--port-file=/var/lib/deltakv/port"]},
    "kvPool": {"enabled": True, "blockBytes": 2048, "capacitySlots": 1024, "hugepages": True,
               "numaNode": 1},
    "deltaStore": {"caSecret": {"name": "store-ca"}},
    "verify": {"checkpoint": "/models/ckpt", "scrubIntervalSeconds": 0.5, "scrubRateGbps": 1.5},
    "multiNode": {"group": "llama-70b", "node": "node-b", "members": ["node-a", "node-b"],
                  "etcdEndpoints": ["http://etcd-0.etcd:2379", "http://10.0.0.7:2379"],
                  "prepareTimeoutMs": 120000, "inDoubtTimeoutMs": 0, "commitMarginMs": 200,
                  "reportTimeoutMs": 5000, "decisionPollMs": 25,
                  "peerUrl": "http://node-b.example.com:8470",
                  "groupTokenSecret": {"name": "llama-70b-group", "key": "group-token"},
                  "topology": {"format": "deltakv.topology/1", "world": 4, "tp": 4, "pp": 1,
                               "nodes": {"node-a": [0, 1], "node-b": [2, 3]}}},
    "metrics": {"serviceMonitor": {"enabled": True, "namespace": "monitoring"}},
})
TOPOLOGY = {"format": "deltakv.topology/1", "world": 4, "tp": 4, "pp": 1,
            "nodes": {"node-a": [0, 1], "node-b": [2, 3]}}
# One node of a three-node group (docs/MULTINODE.md), the sidecar's default timeouts, the peer
# URL from the pod's IP and the group token from its own Secret.
MULTI_NODE = render.merge_values(REQUIRED, {"multiNode": {
    "group": "llama-70b", "node": "node-b", "members": ["node-a", "node-b", "node-c"],
    "etcdEndpoints": ["http://etcd-0.etcd:2379", "http://etcd-1.etcd:2379"],
    "groupTokenSecret": {"name": "llama-70b-group"}}})
CASES = {
    "defaults": REQUIRED,
    "everything": EVERYTHING,
    "multinode": MULTI_NODE,
    "vllm": render.merge_values(render.load_values(render.EXAMPLES_DIR / "values-vllm.yaml"),
                                {"token": {"value": "test-token"}}),
    "sglang": render.load_values(render.EXAMPLES_DIR / "values-sglang.yaml"),
}


def with_required(**override):
    return render.merge_values(REQUIRED, override)


# --- what the sidecar really accepts -------------------------------------------------------

def sidecar_flags_from_source():
    """{flag: takes_value}: the add_option/add_flag calls of cmd_sidecar.cc and
    sidecar_config.cc, and the key table of sidecar_config.cc (a key "shm_name" is the flag
    --shm-name; a kBool key takes no value)."""
    out = {}
    for name in ("cmd_sidecar.cc", "sidecar_config.cc"):
        text = (REPO / "sidecar/src/cli" / name).read_text()
        for kind, flag in re.findall(r'add_(option|flag)\(\s*"(--[a-z0-9-]+)"', text):
            out[flag] = kind == "option"
        for key, kind in re.findall(r'\{"([a-z0-9_]+)",\s*K::k(\w+),', text):
            out["--" + key.replace("_", "-")] = kind != "Bool"
    return out


def sidecar_binary():
    # scripts/test-helm.sh sets DELTAKV_BIN, empty when there is no binary to run.
    path = os.environ.get("DELTAKV_BIN", str(REPO / "build/sidecar/deltakv"))
    return path if path and os.access(path, os.X_OK) else None


SIDECAR_FLAGS = sidecar_flags_from_source()


def http_get_routes():
    text = (REPO / "sidecar/src/server/http_api.cc").read_text()
    return set(re.findall(r's\.Get\(\s*"(/[^"]*)"', text))


def unknown_sidecar_flags(args):
    """The flags in ARGS (after the `sidecar` subcommand) the sidecar does not define, or uses
    wrongly: an option without a value, or a value given to a plain flag."""
    bad = []
    for arg in args[1:]:
        name, has_value = (arg.split("=", 1)[0], True) if "=" in arg else (arg, False)
        if name not in SIDECAR_FLAGS or SIDECAR_FLAGS[name] != has_value:
            bad.append(arg)
    return bad


def test_flag_table_parsed_from_source():
    for flag in ("--listen", "--token-file", "--shm-name", "--state-dir", "--decode-threads",
                 "--kv-block-bytes", "--kv-capacity-slots", "--http-ca-file"):
        assert SIDECAR_FLAGS.get(flag) is True, flag
    assert SIDECAR_FLAGS["--kv-hugepages"] is False
    assert len(SIDECAR_FLAGS) >= 25


@pytest.mark.skipif(sidecar_binary() is None, reason="no deltakv build (set DELTAKV_BIN)")
def test_flag_table_matches_help():
    out = subprocess.run([sidecar_binary(), "sidecar", "--help"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    # CLI11 lists one option a line: "  --listen TEXT [127.0.0.1:8470]  HOST:PORT ...".
    from_help = set(re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]+)", out, re.M)) - {"--help"}
    assert from_help == set(SIDECAR_FLAGS)


def test_unknown_flags_are_found():
    assert unknown_sidecar_flags(["sidecar", "--listen=0.0.0.0:1", "--kv-hugepages"]) == []
    assert unknown_sidecar_flags(["sidecar", "--no-such-flag=1", "--listen", "--kv-hugepages=1"]) \
        == ["--no-such-flag=1", "--listen", "--kv-hugepages=1"]


# --- rendering helpers ----------------------------------------------------------------------

def objects(values):
    return {(m["kind"], m["metadata"]["name"]): m for m in render.manifests(values)}


def one(values, kind):
    found = [m for m in render.manifests(values) if m["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def pod_spec(values):
    return one(values, "Deployment")["spec"]["template"]["spec"]


def container(spec, name):
    return next(c for c in spec["containers"] if c["name"] == name)


def volume(spec, name):
    return next(v for v in spec["volumes"] if v["name"] == name)


def mount_at(c, path):
    return next((m for m in c.get("volumeMounts", []) if m["mountPath"] == path), None)


def env_of(c):
    """The container's plain env values (valueFrom entries as None)."""
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def expand(text, env):
    """Kubernetes' $(VAR) substitution in command, args and env values."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: env[m.group(1)] if env.get(m.group(1)) is not None else m.group(0), text)


def arg_value(args, flag):
    values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    assert len(values) <= 1, f"{flag} given {len(values)} times"
    return values[0] if values else None


# --- the rendered manifests -----------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_lint_strict(case):
    report = render.lint(CASES[case])
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_match_kubernetes_schemas(case):
    kinds = []
    for m in render.manifests(CASES[case]):
        kinds.append(m["kind"])
        if m["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: checked field by field below
        kubernetes_validate.validate(m, KUBE_VERSION, strict=True)
    assert {"Deployment", "Service"} <= set(kinds)


def test_kubernetes_validation_refuses_a_bad_field():
    bad = with_required(engine={"securityContext": {"privilegd": True}})
    deployment = one(bad, "Deployment")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_sidecar_args_are_real_flags(case):
    sidecar = container(pod_spec(CASES[case]), "sidecar")
    assert sidecar["command"] == ["deltakv"]
    assert sidecar["args"][0] == "sidecar"
    assert unknown_sidecar_flags(sidecar["args"]) == []
    names = [a.split("=", 1)[0] for a in sidecar["args"][1:]]
    assert len(names) == len(set(names)), "a flag given twice"


@pytest.mark.skipif(sidecar_binary() is None, reason="no deltakv build (set DELTAKV_BIN)")
@pytest.mark.parametrize("case", sorted(CASES))
def test_sidecar_parses_the_rendered_args(case):
    # CLI11 checks every flag and value (ranges included) before the sidecar runs; the run then
    # stops at the token file, which exists only in the pod, before it creates anything. A usage
    # error exits 1, that stop exits 2 or 3.
    args = container(pod_spec(CASES[case]), "sidecar")["args"]
    token_file = arg_value(args, "--token-file")
    if os.path.exists(token_file):
        pytest.skip(f"{token_file} exists here: the sidecar would start")
    run = subprocess.run([sidecar_binary()] + args, capture_output=True, text=True, timeout=30)
    assert run.returncode in (2, 3), run.stderr
    assert token_file in run.stderr, run.stderr


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", ["engine", "sidecar"])
def test_env_references_in_args_are_defined(case, name):
    c = container(pod_spec(CASES[case]), name)
    defined = {e["name"] for e in c.get("env", [])}
    for arg in c.get("command", []) + c.get("args", []):
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
            assert var in defined, f"{arg}: $({var}) is not in the {name} container's env"


@pytest.mark.parametrize("case", sorted(CASES))
def test_engine_env_names_the_sidecars_shared_memory(case):
    values = CASES[case]
    spec = pod_spec(values)
    engine, sidecar = container(spec, "engine"), container(spec, "sidecar")
    env = env_of(engine)
    shm_name = arg_value(sidecar["args"], "--shm-name")
    assert env["DELTAKV_SHM_NAME"] == shm_name
    assert env["DELTAKV_KV_POOL"] == shm_name + ".kv"
    port = arg_value(sidecar["args"], "--listen").rsplit(":", 1)[1]
    assert env["DELTAKV_SIDECAR_URL"] == f"http://127.0.0.1:{port}"
    token_file = arg_value(sidecar["args"], "--token-file")
    assert env["DELTAKV_TOKEN_FILE"] == token_file
    m = mount_at(engine, str(pathlib.PurePosixPath(token_file).parent))
    assert m is not None and m.get("readOnly") is True
    # The chart's variables come first, so that engine.env can refer to them.
    assert [e["name"] for e in engine["env"][:4]] == [
        "DELTAKV_SHM_NAME", "DELTAKV_KV_POOL", "DELTAKV_SIDECAR_URL", "DELTAKV_TOKEN_FILE"]


def test_engine_without_the_token():
    spec = pod_spec(with_required(token={"value": "t", "mountInEngine": False}))
    engine = container(spec, "engine")
    assert "DELTAKV_TOKEN_FILE" not in env_of(engine)
    assert mount_at(engine, "/etc/deltakv/token") is None
    assert mount_at(container(spec, "sidecar"), "/etc/deltakv/token") is not None


@pytest.mark.parametrize("case", sorted(CASES))
def test_probes_are_the_sidecars_endpoints(case):
    spec = pod_spec(CASES[case])
    sidecar = container(spec, "sidecar")
    routes = http_get_routes()
    assert {"/healthz", "/metrics"} <= routes
    port = sidecar["ports"][0]
    assert port["name"] == "sync-api"
    assert arg_value(sidecar["args"], "--listen") == f"0.0.0.0:{port['containerPort']}"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = sidecar[probe]["httpGet"]
        assert get["path"] == "/healthz" and get["path"] in routes
        assert get["port"] == "sync-api"


@pytest.mark.parametrize("case", sorted(CASES))
def test_dev_shm_is_memory_backed_and_shared(case):
    values = CASES[case]
    spec = pod_spec(values)
    want_size = values.get("shm", {}).get("sizeLimit", "8Gi")
    for c in spec["containers"]:
        m = mount_at(c, "/dev/shm")
        assert m is not None, f"{c['name']} has no /dev/shm"
        v = volume(spec, m["name"])
        assert v["emptyDir"]["medium"] == "Memory"
        assert v["emptyDir"]["sizeLimit"] == want_size


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_volume_is_the_sidecars(case):
    spec = pod_spec(CASES[case])
    engine, sidecar = container(spec, "engine"), container(spec, "sidecar")
    state_dir = arg_value(sidecar["args"], "--state-dir")
    assert mount_at(sidecar, state_dir)["name"] == "state"
    assert mount_at(engine, state_dir) is None
    claim = CASES[case].get("state", {}).get("existingClaim")
    if claim:
        assert volume(spec, "state")["persistentVolumeClaim"] == {"claimName": claim}
    else:
        assert "emptyDir" in volume(spec, "state")


@pytest.mark.parametrize("case", sorted(CASES))
def test_token_file_comes_from_the_secret(case):
    values = CASES[case]
    rendered = objects(values)
    spec = pod_spec(values)
    sidecar = container(spec, "sidecar")
    token_file = pathlib.PurePosixPath(arg_value(sidecar["args"], "--token-file"))
    m = mount_at(sidecar, str(token_file.parent))
    assert m is not None and m.get("readOnly") is True
    secret_volume = volume(spec, m["name"])["secret"]
    assert [i["path"] for i in secret_volume["items"]] == [token_file.name]
    key = secret_volume["items"][0]["key"]
    existing = values.get("token", {}).get("existingSecret")
    if existing:
        assert secret_volume["secretName"] == existing
        assert not [k for k in rendered if k[0] == "Secret"]
    else:
        secret = rendered[("Secret", secret_volume["secretName"])]
        assert base64.b64decode(secret["data"][key]).decode() == values["token"]["value"]
    assert "--token" not in [a.split("=", 1)[0] for a in sidecar["args"]]


def test_default_pod():
    spec = pod_spec(CASES["defaults"])
    # Liveness works across the containers' own pid namespaces (lock files in /dev/shm).
    assert spec["shareProcessNamespace"] is False
    assert spec["enableServiceLinks"] is False
    sidecar = container(spec, "sidecar")
    # Requests equal to limits, integer CPUs: eligible for exclusive cores.
    assert sidecar["resources"] == {"requests": {"cpu": "2", "memory": "2Gi"},
                                    "limits": {"cpu": "2", "memory": "2Gi"}}
    assert arg_value(sidecar["args"], "--decode-threads") == "2"  # the CPU limit
    assert not [a for a in sidecar["args"] if a.startswith(("--kv-", "--serving-cores"))]
    kinds = {m["kind"] for m in render.manifests(CASES["defaults"])}
    assert kinds == {"Deployment", "Service", "Secret"}
    assert "WARNING" not in render.notes(CASES["defaults"])


@pytest.mark.parametrize("pod_security, mode", [
    ({}, 0o444), ({"runAsUser": 1000}, 0o444), ({"runAsUser": 1000, "fsGroup": 2000}, 0o440)])
def test_token_file_is_readable_by_the_containers_user(pod_security, mode):
    spec = pod_spec(with_required(podSecurityContext=pod_security))
    assert volume(spec, "token")["secret"]["defaultMode"] == mode


def test_everything_case():
    spec = pod_spec(EVERYTHING)
    args = container(spec, "sidecar")["args"]
    assert arg_value(args, "--serving-cores") == "0-15,32-47"
    assert arg_value(args, "--decoder") == "walker"
    assert arg_value(args, "--kv-numa-node") == "1"
    assert arg_value(args, "--verify-checkpoint") == "/models/ckpt"
    assert arg_value(args, "--scrub-interval-s") == "0.5"
    assert args[-1] == "--port-file=/var/lib/deltakv/port"
    monitor = one(EVERYTHING, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["default"]}


def test_share_process_namespace_is_optional_and_never_warned_about():
    for share in (False, True):
        values = with_required(shareProcessNamespace=share)
        assert pod_spec(values)["shareProcessNamespace"] is share
        assert "WARNING" not in render.notes(values)


def test_vllm_example_pool_flags():
    args = container(pod_spec(CASES["vllm"]), "sidecar")["args"]
    assert arg_value(args, "--kv-block-bytes") == "2097152"
    assert arg_value(args, "--kv-capacity-slots") == "16384"
    assert arg_value(args, "--kv-numa-node") == "auto"
    assert arg_value(args, "--kv-gpu-pci-bus-id") == "0000:3b:00.0"
    assert arg_value(args, "--decode-threads") == "4"
    assert arg_value(args, "--scrub-interval-s") == "600"
    engine = container(pod_spec(CASES["vllm"]), "engine")
    assert engine["command"] == ["vllm", "serve"]
    config = json.loads(engine["args"][engine["args"].index("--kv-transfer-config") + 1])
    assert config["kv_connector_extra_config"]["spec_module_path"] == "deltakv.vllm"
    pool = config["kv_connector_extra_config"]["deltakv_pool"]
    assert pool == "$(DELTAKV_KV_POOL)" and expand(pool, env_of(engine)) == "deltakv.kv"


def test_sglang_example_pool_and_secrets():
    spec = pod_spec(CASES["sglang"])
    sidecar = container(spec, "sidecar")
    args = sidecar["args"]
    assert arg_value(args, "--kv-block-bytes") == "8388608"
    assert arg_value(args, "--kv-host-fraction") == "0.5"
    assert "--kv-hugepages" in args
    assert arg_value(args, "--decode-threads") == "8"
    ca_file = pathlib.PurePosixPath(arg_value(args, "--http-ca-file"))
    ca_volume = volume(spec, mount_at(sidecar, str(ca_file.parent))["name"])
    assert ca_volume["secret"]["secretName"] == "deltakv-store-ca"
    assert arg_value(args, "--verify-checkpoint") == "$(DELTAKV_VERIFY_CHECKPOINT)"
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["DELTAKV_VERIFY_CHECKPOINT"]["valueFrom"]["secretKeyRef"] == {
        "name": "deltakv-checkpoint", "key": "url"}
    engine = container(spec, "engine")
    assert engine["command"] == ["python3", "-m", "sglang.launch_server"]
    config = json.loads(engine["args"][engine["args"].index(
        "--hicache-storage-backend-extra-config") + 1])
    assert config["module_path"] == "deltakv.sglang"
    assert expand(config["deltakv_pool"], env_of(engine)) == "deltakv.kv"


@pytest.mark.parametrize("case", ["vllm", "sglang"])
def test_example_pool_follows_the_shm_name(case):
    values = render.merge_values(CASES[case], {"sidecar": {"shmName": "llama-a"}})
    spec = pod_spec(values)
    engine, sidecar = container(spec, "engine"), container(spec, "sidecar")
    assert arg_value(sidecar["args"], "--shm-name") == "llama-a"
    args = [expand(a, env_of(engine)) for a in engine["args"]]
    assert any('"deltakv_pool": "llama-a.kv"' in a for a in args), args


def test_large_byte_counts_render_as_integers():
    values = with_required(sidecar={"planBufferBytes": 1099511627776,
                                    "resources": {"limits": {"memory": "200Ti"}}},
                           kvPool={"enabled": True, "blockBytes": 1073741824,
                                   "capacitySlots": 123456, "numaNode": 0},
                           shm={"sizeLimit": "130000Gi"})
    args = container(pod_spec(values), "sidecar")["args"]
    assert arg_value(args, "--plan-buffer-bytes") == "1099511627776"
    assert arg_value(args, "--kv-block-bytes") == "1073741824"
    assert arg_value(args, "--kv-capacity-slots") == "123456"
    assert arg_value(args, "--kv-numa-node") == "0"


# 16384 slots of 2 MiB: a 32 GiB pool.
POOL_32G = {"enabled": True, "blockBytes": 2097152, "capacitySlots": 16384}


@pytest.mark.parametrize("shm, memory, message", [
    ("32Gi", "40Gi", None),                   # exactly the slots' bytes (metadata is small)
    ("31Gi", "40Gi", "more than shm.sizeLimit 31Gi"),
    ("34359738367", "40Gi", "more than shm.sizeLimit"),
    ("33G", "40Gi", "more than shm.sizeLimit 33G"),  # 33e9 bytes < 32 GiB
    ("40Gi", "32000Mi", "more than its memory limit 32000Mi"),
    ("40Gi", "35G", None),
])
def test_pool_must_fit_dev_shm_and_the_sidecars_memory(shm, memory, message):
    values = with_required(kvPool=POOL_32G, shm={"sizeLimit": shm},
                           sidecar={"resources": {"limits": {"memory": memory}}})
    if message is None:
        assert arg_value(container(pod_spec(values), "sidecar")["args"],
                         "--kv-capacity-slots") == "16384"
    else:
        with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
            render.render(values)


def test_pool_slots_are_rounded_like_the_sidecars():
    # 1000-byte blocks take 1024 bytes a slot, 5000-byte blocks 8192.
    fits = with_required(kvPool={"enabled": True, "blockBytes": 1000, "capacitySlots": 1024},
                         shm={"sizeLimit": "1Mi"})
    render.render(fits)
    with pytest.raises(helm.HelmRenderError, match="more than shm.sizeLimit"):
        render.render(render.merge_values(fits, {"kvPool": {"capacitySlots": 1025}}))
    with pytest.raises(helm.HelmRenderError, match="more than shm.sizeLimit"):
        render.render(with_required(kvPool={"enabled": True, "blockBytes": 5000,
                                            "capacitySlots": 129}, shm={"sizeLimit": "1Mi"}))


def test_host_fraction_larger_than_dev_shm_is_warned():
    values = with_required(kvPool={"enabled": True, "blockBytes": 4096, "hostFraction": 0.9},
                           shm={"sizeLimit": "1Gi"},
                           sidecar={"resources": {"limits": {"memory": "4Gi"}}})
    assert "kvPool.hostFraction 0.9" in render.notes(values)
    assert "WARNING" not in render.notes(render.merge_values(values, {"shm": {"sizeLimit": "4Gi"}}))


@pytest.mark.parametrize("threads, cpu, warning", [
    (2, "2", None), (3, "2500m", None), (4, "2500m", "exceeds the sidecar's CPU limit"),
    (8, 4, "exceeds the sidecar's CPU limit"), (0, "2", "decodeThreads is 0")])
def test_decode_threads_against_the_cpu_limit(threads, cpu, warning):
    values = with_required(sidecar={"decodeThreads": threads,
                                    "resources": {"limits": {"cpu": cpu}}})
    text = render.notes(values)
    if warning is None:
        assert "WARNING" not in text
    else:
        assert warning in text


@pytest.mark.parametrize("extra, message", [
    (["--decode-threads=8"], "--decode-threads is set by the chart"),
    (["--kv-block-bytes=4096"], "--kv-block-bytes is set by the chart"),
    (["--listen=127.0.0.1:1"], "--listen is set by the chart"),
    (["--port-file=/tmp/p", "--token=secret"], "--token is refused"),
    (["--group=g"], "--group is refused: the group comes from multiNode.*"),
    (["--node=a"], "--node is refused"),
    (["--group-members=a,b"], "--group-members is refused"),
    (["--etcd-endpoints=http://etcd:2379"], "--etcd-endpoints is refused"),
    (["--group-prepare-timeout-ms=1000"], "--group-prepare-timeout-ms is refused"),
    (["--group-in-doubt-timeout-ms=0"], "--group-in-doubt-timeout-ms is refused"),
])
def test_extra_args_may_not_repeat_the_charts_flags(extra, message):
    values = with_required(kvPool={"enabled": True, "blockBytes": 4096, "capacitySlots": 8},
                           sidecar={"extraArgs": extra})
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render.render(values)


PEER_FLAGS = ("--group-commit-margin-ms", "--group-report-timeout-ms", "--group-decision-poll-ms",
              "--topology",
              "--peer-url", "--group-token-file")
GROUP_FLAGS = ("--group", "--node", "--group-members", "--etcd-endpoints",
               "--group-prepare-timeout-ms", "--group-in-doubt-timeout-ms")


def group_args(args):
    return [a for a in args if a.split("=", 1)[0] in GROUP_FLAGS]


def test_group_flags_are_the_sidecars():
    assert all(SIDECAR_FLAGS.get(f) is True for f in GROUP_FLAGS), SIDECAR_FLAGS


@pytest.mark.parametrize("case, want", [
    ("multinode", ["--group=llama-70b", "--node=node-b", "--group-members=node-a,node-b,node-c"]),
    ("everything", ["--group=llama-70b", "--node=node-b", "--group-members=node-a,node-b",
                    "--group-prepare-timeout-ms=120000", "--group-in-doubt-timeout-ms=0"]),
    ("defaults", []),
    ("vllm", []),
])
def test_multi_node_group_args(case, want):
    # The endpoints reach the sidecar as DELTAKV_ETCD_ENDPOINTS only, never as --etcd-endpoints.
    assert group_args(container(pod_spec(CASES[case]), "sidecar")["args"]) == want


@pytest.mark.parametrize("case", ["multinode", "everything"])
def test_etcd_endpoints_in_a_configmap_and_env(case):
    values = CASES[case]
    rendered = objects(values)
    config_map = rendered[("ConfigMap", "test-deltakv-multinode")]
    assert config_map["data"]["etcd-endpoints"] == ",".join(values["multiNode"]["etcdEndpoints"])
    sidecar = container(pod_spec(values), "sidecar")
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["DELTAKV_ETCD_ENDPOINTS"]["valueFrom"]["configMapKeyRef"] == {
        "name": "test-deltakv-multinode", "key": "etcd-endpoints"}
    assert not [a for a in sidecar["args"] if "etcd" in a]
    assert "checksum/multinode" in one(values, "Deployment")["spec"]["template"][
        "metadata"]["annotations"]
    text = render.notes(values)
    assert 'node "node-b" of group "llama-70b"' in text and "docs/MULTINODE.md" in text
    assert "WARNING" not in text


def test_single_node_has_no_group():
    assert not [k for k in objects(REQUIRED) if k[0] == "ConfigMap"]
    sidecar = container(pod_spec(REQUIRED), "sidecar")
    assert "env" not in sidecar
    assert "Multi-node" not in render.notes(REQUIRED)
    # Endpoints without a group: carried, unused, and warned about.
    values = with_required(multiNode={"etcdEndpoints": ["http://etcd:2379"]})
    assert group_args(container(pod_spec(values), "sidecar")["args"]) == []
    assert ("ConfigMap", "test-deltakv-multinode") in objects(values)
    assert "WARNING: multiNode.etcdEndpoints is set but multiNode.group is not" in \
        render.notes(values)


def sidecar_run_here(values, tmp_path, etcd_env=True, **replace):
    """Runs the rendered sidecar command line here, with the pod's DELTAKV_ETCD_ENDPOINTS (from
    the rendered ConfigMap) and the pod-only paths and names swapped for local ones; REPLACE
    sets further flags (flag name without dashes, '_' for '-')."""
    rendered = objects(values)
    args = container(pod_spec(values), "sidecar")["args"]
    (tmp_path / "token").write_text("test-token\n")
    (tmp_path / "group-token").write_text("group-token\n")
    local = {"--listen": "127.0.0.1:0", "--token-file": str(tmp_path / "token"),
             "--shm-name": f"deltakv-helm-test-{os.getpid()}",
             "--state-dir": str(tmp_path / "state"),
             "--group-token-file": str(tmp_path / "group-token")}
    config_map = rendered.get(("ConfigMap", "test-deltakv-multinode"), {}).get("data", {})
    if "topology.json" in config_map:
        (tmp_path / "topology.json").write_text(config_map["topology.json"])
        local["--topology"] = str(tmp_path / "topology.json")
    # The pod's IP from the downward API: this host's loopback here.
    args = [expand(a, {"POD_IP": "127.0.0.1"}) for a in args]
    local.update({"--" + k.replace("_", "-"): v for k, v in replace.items()})
    args = [f"{a.split('=', 1)[0]}={local[a.split('=', 1)[0]]}"
            if a.split("=", 1)[0] in local else a for a in args]
    env = {k: v for k, v in os.environ.items()
           if k not in ("DELTAKV_ETCD_ENDPOINTS", "DELTAKV_TOKEN")}
    if etcd_env:
        env["DELTAKV_ETCD_ENDPOINTS"] = rendered[("ConfigMap", "test-deltakv-multinode")][
            "data"]["etcd-endpoints"]
    return subprocess.run([sidecar_binary()] + args, capture_output=True, text=True,
                          timeout=30, env=env)


# Nothing listens on port 1: the sidecar's etcd client cannot connect.
UNREACHABLE_ETCD = render.merge_values(MULTI_NODE, {"multiNode": {
    "etcdEndpoints": ["http://127.0.0.1:1"], "prepareTimeoutMs": 100,
    "inDoubtTimeoutMs": 3600000}})


@pytest.mark.skipif(sidecar_binary() is None, reason="no deltakv build (set DELTAKV_BIN)")
def test_sidecar_joins_the_group_of_the_rendered_args(tmp_path):
    # With a token file the sidecar gets past every flag and the group's own checks (names,
    # the node among the members, timeouts, endpoints from DELTAKV_ETCD_ENDPOINTS) and stops
    # only where it registers in etcd, which does not answer: an I/O error, exit code 3. It
    # creates nothing (no KV pool; the control segment comes after the group).
    run = sidecar_run_here(UNREACHABLE_ETCD, tmp_path)
    assert run.returncode == 3, run.stderr
    assert "group: etcd http://127.0.0.1:1: no endpoint answered" in run.stderr, run.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.skipif(sidecar_binary() is None, reason="no deltakv build (set DELTAKV_BIN)")
@pytest.mark.parametrize("etcd_env, replace, message", [
    (False, {}, "a group needs --etcd-endpoints (or DELTAKV_ETCD_ENDPOINTS)"),
    (True, {"node": "node-x"}, "node 'node-x' is not among the group's members"),
    (True, {"group_members": "node-b,node-b"}, "member 'node-b' is listed twice"),
    (True, {"group": "a/b"}, "group name 'a/b': 1-128 characters, no '/'"),
], ids=["no-etcd-env", "node-not-member", "duplicate-member", "slash"])
def test_sidecar_refuses_what_the_chart_refuses(tmp_path, etcd_env, replace, message):
    # The chart's schema and render checks (below) stop these before the pod; the sidecar's own
    # refusals at start (usage of a group: exit code 2) are the same.
    run = sidecar_run_here(UNREACHABLE_ETCD, tmp_path, etcd_env=etcd_env, **replace)
    assert run.returncode == 2, run.stderr
    assert message in run.stderr, run.stderr


def test_service_reaches_the_sync_api():
    spec = pod_spec(CASES["defaults"])
    service = one(CASES["defaults"], "Service")
    labels = one(CASES["defaults"], "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == container(spec, "sidecar")["ports"][0]["name"]
    assert port["port"] == 8470


def test_service_monitor_fields():
    values = render.merge_values(CASES["defaults"], {"metrics": {"serviceMonitor": {
        "enabled": True, "labels": {"release": "prometheus"}, "interval": "15s"}}})
    monitor = one(values, "ServiceMonitor")
    service = one(values, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert set(monitor["spec"]) == {"selector", "namespaceSelector", "endpoints"}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["default"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert set(endpoint) == {"port", "path", "interval", "scrapeTimeout"}
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert endpoint["path"] == "/metrics" and endpoint["path"] in http_get_routes()
    assert endpoint["interval"] == "15s" and endpoint["scrapeTimeout"] == "10s"


# --- values and their schema ----------------------------------------------------------------

def schema_objects(node, where="#"):
    """Every object schema with declared properties, and where it is."""
    if isinstance(node, dict):
        if "properties" in node:
            yield where, node
        for key, child in node.items():
            yield from schema_objects(child, f"{where}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from schema_objects(child, f"{where}/{i}")


def test_schema_is_draft7_and_closed():
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    open_objects = [w for w, o in schema_objects(SCHEMA) if o.get("additionalProperties") is not False]
    assert open_objects == []


def test_schema_covers_every_default_value():
    validator = jsonschema.Draft7Validator(SCHEMA)

    def walk(values, node, where):
        for key, value in values.items():
            assert key in node.get("properties", {}), f"{where}.{key} not in the schema"
            child = node["properties"][key]
            if isinstance(value, dict) and "properties" in child:
                walk(value, child, f"{where}.{key}")

    defaults = yaml.safe_load((render.CHART_DIR / "values.yaml").read_text())
    walk(defaults, SCHEMA, "values")
    assert list(validator.iter_errors(defaults)) == []


@pytest.mark.parametrize("path", sorted(p.name for p in render.EXAMPLES_DIR.glob("*.yaml")))
def test_example_values_match_the_schema(path):
    defaults = yaml.safe_load((render.CHART_DIR / "values.yaml").read_text())
    merged = render.merge_values(defaults, render.load_values(render.EXAMPLES_DIR / path))
    jsonschema.Draft7Validator(SCHEMA).validate(merged)


MISSPELLED = [
    {"replicas": 2},
    {"sidecar": {"decodeThread": 4}},
    {"kvPool": {"blockbytes": 2097152}},
    {"shm": {"size": "1Gi"}},
    {"metrics": {"serviceMonitor": {"enable": True}}},
    {"deltaStore": {"caSecret": {"nmae": "ca"}}},
    {"sidecar": {"probes": {"startup": {"periodSecond": 5}}}},
    {"multiNode": {"etcd": ["http://etcd:2379"]}},
    {"multiNode": {"groupMembers": ["a", "b"]}},
    {"multiNode": {"prepareTimeout": 1000}},
    {"multiNode": {"groupTokenSecret": {"nmae": "g"}}},
    {"multiNode": {"peerURL": "http://a:1"}},
    {"sidecar": {"shutdownTimeout": 30}},
]


@pytest.mark.parametrize("typo", MISSPELLED, ids=lambda t: json.dumps(t))
def test_misspelled_value_is_refused(typo):
    defaults = yaml.safe_load((render.CHART_DIR / "values.yaml").read_text())
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        jsonschema.Draft7Validator(SCHEMA).validate(render.merge_values(defaults, typo))
    with pytest.raises(helm.HelmValuesError, match="additional properties"):
        render.render(render.merge_values(REQUIRED, typo))


@pytest.mark.parametrize("bad", [
    {"sidecar": {"decodeThreads": 300}},
    {"sidecar": {"planBufferBytes": 1024}},
    {"sidecar": {"decoder": "zstd"}},
    {"sidecar": {"servingCores": "0-3,x"}},
    {"kvPool": {"hostFraction": 1.5}},
    {"kvPool": {"numaNode": "near"}},
    {"deltaStore": {"attempts": 0}},
    {"shm": {"sizeLimit": "lots"}},
    {"kvPool": {"blockBytes": 1073741825}},
    {"kvPool": {"capacitySlots": 4294967295}},
    {"sidecar": {"port": 0}},
    {"sidecar": {"extraArgs": ["port-file=/x"]}},
    {"enableServiceLinks": "no"},
    {"metrics": {"serviceMonitor": {"interval": "30"}}},
    {"multiNode": {"etcdEndpoints": ["https://etcd:2379"]}},
    {"multiNode": {"etcdEndpoints": ["http://etcd:2379/v3"]}},
    {"multiNode": {"etcdEndpoints": ["etcd:2379"]}},
    {"multiNode": {"etcdEndpoints": ["http://etcd"]}},
    {"multiNode": {"etcdEndpoints": ["http://a:2379", "http://a:2379"]}},
    {"multiNode": {"group": "a/b"}},
    {"multiNode": {"group": "g" * 129}},
    {"multiNode": {"node": "a,b"}},
    {"multiNode": {"node": "n" * 129}},
    {"multiNode": {"members": ["a", "a"]}},
    {"multiNode": {"members": [""]}},
    {"multiNode": {"members": ["a/b"]}},
    {"multiNode": {"members": ["a,b"]}},
    {"multiNode": {"members": ["m" * 129]}},
    {"multiNode": {"members": "a,b"}},
    {"multiNode": {"prepareTimeoutMs": 99}},
    {"multiNode": {"prepareTimeoutMs": 3600001}},
    {"multiNode": {"prepareTimeoutMs": "60000"}},
    {"multiNode": {"inDoubtTimeoutMs": -1}},
    {"multiNode": {"inDoubtTimeoutMs": 3600001}},
    {"multiNode": {"commitMarginMs": 10001}},
    {"multiNode": {"commitMarginMs": -1}},
    {"multiNode": {"reportTimeoutMs": 600001}},
    {"multiNode": {"reportTimeoutMs": "2000"}},
    {"multiNode": {"decisionPollMs": 9}},
    {"multiNode": {"decisionPollMs": 60001}},
    {"multiNode": {"peerUrl": "https://10.0.0.1:8470"}},
    {"multiNode": {"peerUrl": "http://10.0.0.1"}},
    {"multiNode": {"peerUrl": "http://user@10.0.0.1:8470"}},
    {"multiNode": {"peerUrl": "http://10.0.0.1:8470/v1"}},
    {"multiNode": {"peerUrl": "http://fd00::1:8470"}},
    {"multiNode": {"groupTokenSecret": {"name": "g", "key": ""}}},
    {"multiNode": {"groupTokenSecret": "g"}},
    {"multiNode": {"topology": "/etc/topology.json"}},
    {"multiNode": {"topology": dict(TOPOLOGY, format="deltakv.topology/2")}},
    {"multiNode": {"topology": {k: v for k, v in TOPOLOGY.items() if k != "nodes"}}},
    {"multiNode": {"topology": dict(TOPOLOGY, world=0)}},
    {"multiNode": {"topology": dict(TOPOLOGY, tp=0)}},
    {"multiNode": {"topology": dict(TOPOLOGY, dp=1)}},
    {"multiNode": {"topology": dict(TOPOLOGY, nodes={})}},
    {"multiNode": {"topology": dict(TOPOLOGY, nodes={"node-a": []})}},
    {"multiNode": {"topology": dict(TOPOLOGY, nodes={"node-a": [0, 0]})}},
    {"multiNode": {"topology": dict(TOPOLOGY, nodes={"node-a": [-1]})}},
    {"multiNode": {"topology": dict(TOPOLOGY, nodes={"node-a": ["0"]})}},
    {"multiNode": {"topology": dict(TOPOLOGY, nodes={"a/b": [0]})}},
    {"sidecar": {"logFormat": "logfmt"}},
    {"sidecar": {"shutdownTimeoutSeconds": 0}},
    {"sidecar": {"shutdownTimeoutSeconds": 3601}},
    {"sidecar": {"volumeStore": "s3://a b"}},
], ids=lambda t: json.dumps(t)[:80])
def test_out_of_range_value_is_refused(bad):
    with pytest.raises(helm.HelmValuesError):
        render.render(render.merge_values(REQUIRED, bad))


@pytest.mark.parametrize("missing, message", [
    ({"token": {"value": None}}, "token.value or token.existingSecret is required"),
    ({"engine": {"image": {"repository": None}}}, "engine.image.repository is required"),
    ({"sidecar": {"image": {"repository": None}}}, "sidecar.image.repository is required"),
])
def test_required_value_missing_fails_render(missing, message):
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render.render(render.merge_values(REQUIRED, missing))


def test_defaults_alone_do_not_render():
    with pytest.raises(helm.HelmRenderError, match="is required"):
        render.render({})


@pytest.mark.parametrize("bad, message", [
    ({"kvPool": {"enabled": True, "capacitySlots": 8}}, "kvPool.blockBytes is required"),
    ({"kvPool": {"enabled": True, "blockBytes": 4096}}, "capacitySlots or hostFraction is required"),
    ({"kvPool": {"enabled": True, "blockBytes": 4096, "capacitySlots": 8, "hostFraction": 0.5}},
     "not both"),
    ({"kvPool": {"enabled": True, "blockBytes": 4096, "capacitySlots": 8,
                 "gpuPciBusId": "0000:3b:00.0"}}, "used with kvPool.numaNode: auto"),
    ({"verify": {"checkpoint": "/ckpt", "checkpointSecret": {"name": "s"}}}, "exclude each other"),
    ({"token": {"existingSecret": "s"}}, "token.value and token.existingSecret exclude each other"),
    ({"engine": {"env": [{"name": "DELTAKV_KV_POOL", "value": "x.kv"}]}},
     "engine.env: DELTAKV_KV_POOL is set by the chart"),
    ({"multiNode": {"group": "g", "etcdEndpoints": ["http://etcd:2379"]}},
     "multiNode: group, node and members go together (group set, node, members not)"),
    ({"multiNode": {"group": "g", "node": "a", "etcdEndpoints": ["http://etcd:2379"]}},
     "multiNode: group, node and members go together (group, node set, members not)"),
    ({"multiNode": {"node": "a", "members": ["a", "b"]}},
     "multiNode: group, node and members go together (node, members set, group not)"),
    ({"multiNode": {"members": ["a", "b"]}},
     "multiNode: group, node and members go together (members set, group, node not)"),
    ({"multiNode": {"group": "g", "node": "c", "members": ["a", "b"],
                    "etcdEndpoints": ["http://etcd:2379"]}},
     'multiNode.node "c" is not among multiNode.members [a, b]'),
    ({"multiNode": {"group": "g", "node": "a", "members": ["a", "b"]}},
     "multiNode.etcdEndpoints is required with multiNode.group"),
    ({"replicaCount": 2, "multiNode": {"group": "g", "node": "a", "members": ["a", "b"],
                                       "etcdEndpoints": ["http://etcd:2379"]}},
     "install one release per node, with replicaCount 1"),
    ({"multiNode": {"prepareTimeoutMs": 1000}},
     "multiNode.prepareTimeoutMs is used with multiNode.group"),
    ({"multiNode": {"inDoubtTimeoutMs": 0}},
     "multiNode.inDoubtTimeoutMs is used with multiNode.group"),
    ({"multiNode": {"commitMarginMs": 0}}, "multiNode.commitMarginMs is used with multiNode.group"),
    ({"multiNode": {"reportTimeoutMs": 100}},
     "multiNode.reportTimeoutMs is used with multiNode.group"),
    ({"multiNode": {"decisionPollMs": 50}},
     "multiNode.decisionPollMs is used with multiNode.group"),
    ({"multiNode": {"topology": TOPOLOGY}},
     "multiNode.topology is used with multiNode.group: the topology describes the ranks"),
    ({"multiNode": {"peerUrl": "http://10.0.0.1:8470"}},
     "multiNode.peerUrl is used with multiNode.group"),
    ({"multiNode": {"groupTokenSecret": {"name": "g"}}},
     "multiNode.groupTokenSecret is used with multiNode.group"),
    ({"multiNode": {"group": "g", "node": "a", "members": ["a", "b"],
                    "etcdEndpoints": ["http://etcd:2379"]}},
     "no token source is shared: name an existing Secret in multiNode.groupTokenSecret"),
    ({"multiNode": {"group": "g", "node": "node-c", "members": ["node-a", "node-c"],
                    "etcdEndpoints": ["http://etcd:2379"], "groupTokenSecret": {"name": "g"},
                    "topology": TOPOLOGY}},
     'multiNode.topology: its nodes [node-a, node-b] do not include multiNode.node "node-c"'),
    ({"multiNode": {"group": "g", "node": "node-a", "members": ["node-a", "node-b", "node-c"],
                    "etcdEndpoints": ["http://etcd:2379"], "groupTokenSecret": {"name": "g"},
                    "topology": TOPOLOGY}},
     "multiNode.topology: its nodes [node-a, node-b] must be multiNode.members "
     "[node-a, node-b, node-c]"),
    ({"multiNode": {"group": "g", "node": "node-a", "members": ["node-a", "node-b"],
                    "etcdEndpoints": ["http://etcd:2379"], "groupTokenSecret": {"name": "g"},
                    "topology": dict(TOPOLOGY, world=8)}},
     "multiNode.topology: world 8 must equal tp * pp (4 * 1)"),
    ({"multiNode": {"group": "g", "node": "a", "members": ["a", "b"],
                    "etcdEndpoints": ["http://etcd:2379"], "groupTokenSecret": {"name": "g"}},
      "sidecar": {"env": [{"name": "POD_IP", "value": "10.0.0.1"}]}},
     "sidecar.env: POD_IP is set by the chart"),
    ({"sidecar": {"shutdownTimeoutSeconds": 60}},
     "terminationGracePeriodSeconds 60 must be above sidecar.shutdownTimeoutSeconds 60"),
    ({"terminationGracePeriodSeconds": 10},
     "terminationGracePeriodSeconds 10 must be above sidecar.shutdownTimeoutSeconds 30"),
    ({"multiNode": {"etcdEndpoints": ["http://etcd:2379"]},
      "sidecar": {"env": [{"name": "DELTAKV_ETCD_ENDPOINTS", "value": "http://x:1"}]}},
     "sidecar.env: DELTAKV_ETCD_ENDPOINTS is set by the chart"),
], ids=lambda t: json.dumps(t) if isinstance(t, dict) else t)
def test_contradictory_values_fail_render(bad, message):
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render.render(render.merge_values(REQUIRED, bad))


# --- logs, shutdown, volume store, the group's peer protocol ---------------------------------

def test_new_flags_are_the_sidecars():
    for flag in PEER_FLAGS + ("--log-format", "--shutdown-timeout-s", "--volume-store"):
        assert SIDECAR_FLAGS.get(flag) is True, flag


@pytest.mark.parametrize("case, want", [
    ("defaults", {"--log-format": "text", "--shutdown-timeout-s": "30", "--volume-store": None}),
    ("everything", {"--log-format": "json", "--shutdown-timeout-s": "120",
                    "--volume-store": "s3://volumes.example.com/deltakv"}),
])
def test_log_format_shutdown_and_volume_store_args(case, want):
    values = CASES[case]
    spec = pod_spec(values)
    args = container(spec, "sidecar")["args"]
    assert {flag: arg_value(args, flag) for flag in want} == want
    assert spec["terminationGracePeriodSeconds"] > int(arg_value(args, "--shutdown-timeout-s"))


def test_volume_store_credentials_through_sidecar_env():
    env = {e["name"]: e for e in container(pod_spec(EVERYTHING), "sidecar")["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "volume-store", "key": "access-key-id"}


def test_peer_url_defaults_to_the_pod_ip():
    sidecar = container(pod_spec(MULTI_NODE), "sidecar")
    assert arg_value(sidecar["args"], "--peer-url") == "http://$(POD_IP):8470"
    assert arg_value(sidecar["args"], "--listen") == "0.0.0.0:8470"
    (pod_ip,) = [e for e in sidecar["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # The variable comes first, so that nothing the user adds can shadow it.
    assert sidecar["env"][0]["name"] == "POD_IP"
    values = render.merge_values(MULTI_NODE, {"sidecar": {"port": 9000}})
    assert arg_value(container(pod_spec(values), "sidecar")["args"], "--peer-url") == \
        "http://$(POD_IP):9000"


def test_explicit_peer_url_and_peer_timeouts():
    sidecar = container(pod_spec(EVERYTHING), "sidecar")
    args = sidecar["args"]
    assert arg_value(args, "--peer-url") == "http://node-b.example.com:8470"
    assert "POD_IP" not in env_of(sidecar)
    assert arg_value(args, "--group-commit-margin-ms") == "200"
    assert arg_value(args, "--group-report-timeout-ms") == "5000"
    assert arg_value(args, "--group-decision-poll-ms") == "25"
    for flag in ("--group-commit-margin-ms", "--group-report-timeout-ms",
                 "--group-decision-poll-ms", "--topology"):
        assert arg_value(container(pod_spec(MULTI_NODE), "sidecar")["args"], flag) is None
    # Zero is a value of its own, not "unset".
    values = render.merge_values(MULTI_NODE, {"multiNode": {"commitMarginMs": 0,
                                                            "reportTimeoutMs": 0}})
    args = container(pod_spec(values), "sidecar")["args"]
    assert arg_value(args, "--group-commit-margin-ms") == "0"
    assert arg_value(args, "--group-report-timeout-ms") == "0"


def test_single_node_has_no_peer_flags():
    for case in ("defaults", "vllm", "sglang"):
        sidecar = container(pod_spec(CASES[case]), "sidecar")
        assert [a for a in sidecar["args"] if a.split("=", 1)[0] in PEER_FLAGS] == []
        assert "POD_IP" not in env_of(sidecar)


def test_topology_in_the_configmap_mounted_in_the_sidecar():
    rendered = objects(EVERYTHING)
    config_map = rendered[("ConfigMap", "test-deltakv-multinode")]
    assert json.loads(config_map["data"]["topology.json"]) == TOPOLOGY
    spec = pod_spec(EVERYTHING)
    sidecar = container(spec, "sidecar")
    path = arg_value(sidecar["args"], "--topology")
    mount = mount_at(sidecar, str(pathlib.PurePosixPath(path).parent))
    assert mount is not None and mount.get("readOnly") is True
    assert volume(spec, mount["name"])["configMap"] == {
        "name": "test-deltakv-multinode",
        "items": [{"key": "topology.json", "path": pathlib.PurePosixPath(path).name}]}
    assert mount_at(container(spec, "engine"), mount["mountPath"]) is None
    # The ConfigMap's checksum restarts the pod when the topology changes.
    changed = render.merge_values(EVERYTHING, {"multiNode": {"topology": {"nodes": {
        "node-a": [0, 1, 2], "node-b": [3]}}}})
    annotations = [one(v, "Deployment")["spec"]["template"]["metadata"]["annotations"]
                   for v in (EVERYTHING, changed)]
    assert annotations[0]["checksum/multinode"] != annotations[1]["checksum/multinode"]


def test_group_token_from_its_secret():
    spec = pod_spec(EVERYTHING)
    sidecar = container(spec, "sidecar")
    path = arg_value(sidecar["args"], "--group-token-file")
    assert path == "/etc/deltakv/group-token/group-token"
    mount = mount_at(sidecar, "/etc/deltakv/group-token")
    assert mount is not None and mount.get("readOnly") is True
    assert volume(spec, mount["name"])["secret"] == {
        "secretName": "llama-70b-group", "defaultMode": 0o440,
        "items": [{"key": "group-token", "path": "group-token"}]}
    assert mount_at(container(spec, "engine"), "/etc/deltakv/group-token") is None
    # No Secret of the chart's own for it.
    assert [k for k in objects(EVERYTHING) if k[0] == "Secret"] == [("Secret", "test-deltakv-token")]


def test_sidecar_token_as_group_token_from_an_existing_secret():
    # token.existingSecret, the same Secret in every release: the sidecar's own token is then
    # the group token, and the chart gives no --group-token-file.
    values = render.merge_values(MULTI_NODE, {
        "token": {"value": None, "existingSecret": "deltakv-token"},
        "multiNode": {"groupTokenSecret": {"name": ""}}})
    args = container(pod_spec(values), "sidecar")["args"]
    assert arg_value(args, "--group-token-file") is None
    assert arg_value(args, "--group") == "llama-70b"


@pytest.mark.parametrize("extra", [["--topology=/x.json"], ["--peer-url=http://a:1"],
                                   ["--group-token-file=/t"], ["--group-commit-margin-ms=1"],
                                   ["--group-report-timeout-ms=1"],
                                   ["--group-decision-poll-ms=50"]])
def test_extra_args_may_not_give_peer_flags(extra):
    with pytest.raises(helm.HelmRenderError, match=re.escape(f"{extra[0].split('=')[0]} is refused")):
        render.render(with_required(sidecar={"extraArgs": extra}))


@pytest.mark.parametrize("extra", [["--log-format=json"], ["--shutdown-timeout-s=5"]])
def test_extra_args_may_not_repeat_logs_or_shutdown(extra):
    with pytest.raises(helm.HelmRenderError, match="is set by the chart"):
        render.render(with_required(sidecar={"extraArgs": extra}))


# EVERYTHING's group, topology and peer flags, with an etcd that does not answer.
PEER_GROUP = render.merge_values(EVERYTHING, {
    "kvPool": {"enabled": False}, "verify": {"checkpoint": ""},
    "deltaStore": {"caSecret": {"name": ""}},
    "sidecar": {"extraArgs": []},
    "multiNode": {"etcdEndpoints": ["http://127.0.0.1:1"], "prepareTimeoutMs": 100,
                  "peerUrl": ""}})


@pytest.mark.skipif(sidecar_binary() is None, reason="no deltakv build (set DELTAKV_BIN)")
def test_sidecar_accepts_the_rendered_peer_flags(tmp_path):
    # The rendered topology file, group token file, peer URL (from $(POD_IP)), commit margin,
    # report timeout, log format, shutdown timeout and volume store all pass the sidecar's
    # checks; it stops where it registers in etcd (exit code 3).
    args = container(pod_spec(PEER_GROUP), "sidecar")["args"]
    assert arg_value(args, "--log-format") == "json" and arg_value(args, "--volume-store")
    run = sidecar_run_here(PEER_GROUP, tmp_path)
    assert run.returncode == 3, run.stderr
    assert "group: etcd http://127.0.0.1:1: no endpoint answered" in run.stderr, run.stderr


@pytest.mark.skipif(sidecar_binary() is None, reason="no deltakv build (set DELTAKV_BIN)")
@pytest.mark.parametrize("override, message", [
    ({"topology": {"nodes": {"node-a": [0, 1], "node-b": [3]}}}, "rank 2"),
    ({"peerUrl": "http://[fd00::1]:8470"}, None),
], ids=["topology-gap", "ipv6-peer-url"])
def test_sidecar_reads_the_rendered_topology_and_peer_url(tmp_path, override, message):
    # A gap in the topology passes the chart (it checks the shape and the node names) and is
    # refused by the sidecar when it reads the rendered file (exit code 2); a bracketed IPv6
    # peer URL passes both.
    values = render.merge_values(PEER_GROUP, {"multiNode": override})
    run = sidecar_run_here(values, tmp_path)
    if message is None:
        assert run.returncode == 3, run.stderr
    else:
        assert run.returncode == 2, run.stderr
        assert message in run.stderr, run.stderr
