"""GPU models on the OpenB replay: the model-agnostic observation (`env.ENCODINGS`) reads a
node's GPU model off the per-model table (`power.GPU_MODELS`), so a network runs on a
cluster of models the trace lacks; the one-hot encoding of older runs is refused there,
naming the models it was trained on; an unknown model is refused before any work."""

import csv
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vte
from tests.test_openb import small_trace
from vte import checkpoint as ckpt
from vte.openb import env as oenv
from vte.openb import power
from vte.openb.network import OpenBNet, as_policy, encoding_of
from vte.openb.registration import encoding_of_config, init_check

RENAMED = {"T4": "A100-40GB", "V100M32": "H100-80GB"}   # models OpenB lacks


@pytest.fixture
def table(monkeypatch):
    """The per-model table, restored after the test; the renamed models get the numbers of
    the models they stand for."""
    monkeypatch.setattr(power, "GPU_MODELS", dict(power.GPU_MODELS))
    monkeypatch.setattr(power, "GPU_WATTS", dict(power.GPU_WATTS))
    for old, new in RENAMED.items():
        power.add_gpu_model(new, *power.GPU_MODELS[old])
    return power.GPU_MODELS


def _renamed(tmp_path, name, source, column):
    """A copy of a bundled CSV with the models of `column` renamed (`RENAMED`)."""
    with open(source, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row[column] = "|".join(RENAMED.get(m, m) for m in row[column].split("|")) \
            if row[column] else ""
    path = tmp_path / name
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    return str(path)


def test_the_agnostic_columns_are_the_pods_flag_and_the_per_model_table(tmp_path):
    nodes, pods = small_trace(tmp_path, pods=40, seed=3)               # T4 and G2 nodes
    params = oenv.make_params(nodes, pods, seeds=[5])
    assert params.encoding == "agnostic"
    obs, state = oenv.reset(jax.random.PRNGKey(0), params)
    spec, st = state.cluster, state.nodes
    onehot = oenv.observe(st, oenv.current_pod(state, params), spec, params.num_models,
                          power=params.power, encoding="onehot")
    np.testing.assert_array_equal(obs.nodes[:, :16], onehot.nodes[:, :16])
    assert obs.pod.shape == (5,) and onehot.pod.shape == (5 + 2,)
    names = np.asarray(nodes.models)[np.asarray(spec.model)]
    want = np.array([[power.GPU_MODELS[m][0] / 100, power.GPU_MODELS[m][1] / 1000,
                      power.GPU_MODELS[m][2] / 1000] for m in names], np.float32)
    np.testing.assert_allclose(obs.nodes[:, 17:], want, rtol=1e-6)
    # The flag: a pod that names T4 may use the T4 nodes only; one naming none, every node.
    pod = oenv.current_pod(state, params)
    t4 = pod.replace(model_mask=jnp.int32(1 << nodes.models.index("T4")))
    flag = oenv.observe(st, t4, spec, params.num_models, power=params.power).nodes[:, 16]
    np.testing.assert_array_equal(flag, (names == "T4").astype(np.float32))
    anyone = oenv.observe(st, pod.replace(model_mask=jnp.int32(0)), spec, params.num_models,
                          power=params.power).nodes[:, 16]
    assert (np.asarray(anyone) == 1).all()
    columns = oenv.observation_columns(params)
    assert [c.name for c in columns["nodes"][16:]] == [
        "gpu_allowed", "gpu_memory/100GiB", "gpu_idle_w/1000", "gpu_max_w/1000"]
    specs = oenv.observation_specs(params)
    assert specs["nodes"].shape == (params.num_nodes, 20) and specs["pod"].shape == (5,)
    assert (np.asarray(obs.nodes) <= specs["nodes"].high).all()


def test_the_table_takes_new_models_and_refuses_unknown_ones_before_any_work(tmp_path, table):
    nodes, pods = small_trace(tmp_path, pods=10)
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"B200": {"memory_gib": 180, "idle_w": 140, "max_w": 1000}}))
    assert power.load_gpu_models(str(models)) == ["B200"]
    assert power.power_model(["B200", "A100-40GB"]).gpu_memory_gib.tolist() == [180, 16]
    with pytest.raises(ValueError, match=r"'X1', 'X2' are not in the per-model table.*"
                                         r"add_gpu_model.*load_gpu_models.*VTE_OPENB_GPU_MODELS"):
        power.power_model(["T4", "X1", "X2"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"X": {"memory_gib": 8, "idle_w": 90, "max_w": 70}}))
    with pytest.raises(ValueError, match="bad.json: GPU model 'X'.*0 <= idle_w <= max_w"):
        power.load_gpu_models(str(bad))
    unknown = dataclasses.replace(nodes, models=("G2", "Z9"))
    with pytest.raises(ValueError, match="'Z9' are not in the per-model table"):
        oenv.make_params(unknown, pods, seeds=range(10 ** 6))     # refused before the bank


def test_old_runs_are_one_hot_new_ones_agnostic_and_neither_seeds_the_other():
    assert encoding_of_config({"env": {"name": "openb", "nodes": "gpu"}}) == "onehot"  # saved before
    assert encoding_of_config({"env": {"name": "openb", "encoding": "agnostic"}}) == "agnostic"
    assert encoding_of_config(ckpt.load_config("zoo:openb-evidence")) in oenv.ENCODINGS
    from vte.train.config import ImitateConfig
    config = ImitateConfig.from_args(["--env", "openb"])
    assert config.env_config.encoding == "agnostic"
    assert config.to_dict()["env"]["encoding"] == "agnostic"
    assert "--encoding onehot" in init_check({"env": {"name": "openb", "nodes": "gpu"}}, config)
    assert init_check({"env": {"name": "openb", "encoding": "agnostic", "nodes": "x.csv"}},
                      config) is None


@pytest.mark.slow   # one compiled episode of the network on two banks (~30 s)
def test_a_cluster_of_renamed_models_gets_the_same_decisions_and_refuses_one_hot(tmp_path, table):
    """OpenB's cluster with T4 renamed A100-40GB and V100M32 H100-80GB (the table giving
    them the same numbers): on a 16-node sub-cluster the zoo's agnostic network sees the
    same observations and places every pod where it does on the original names; a one-hot
    network is refused, naming the models it was trained on."""
    from vte.openb.trace import DATA_DIR, load_nodes, load_pods
    nodes = load_nodes("gpu")
    renamed = load_nodes(_renamed(tmp_path, "nodes.csv",
                                  DATA_DIR / "openb_node_list_gpu_node.csv", "model"))
    assert set(RENAMED.values()) <= set(renamed.models) and not set(RENAMED) & set(renamed.models)
    pod_file = _renamed(tmp_path, "pods.csv", DATA_DIR / "openb_pod_list_default.csv", "gpu_spec")
    banks = [oenv.make_params(n, p, seeds=[42], subset=16) for n, p in (
        (nodes, load_pods("default", nodes)), (renamed, load_pods(pod_file, renamed)))]
    assert banks[0].power.gpu_busy_w.tolist() != banks[1].power.gpu_busy_w.tolist()  # reordered
    config = ckpt.load_config("zoo:openb-agnostic")
    assert encoding_of_config(config) == "agnostic"
    net = OpenBNet(hidden=config["hidden"])
    variables = ckpt.load_variables("zoo:openb-agnostic")
    assert encoding_of(variables) == "agnostic"

    @jax.jit
    def episode(params):
        def body(carry, _):
            obs, state = carry
            logits, _ = net.apply(variables, obs)
            action = jnp.argmax(logits).astype(jnp.int32)
            obs, state, _, _, _, info = oenv.step_env(jax.random.PRNGKey(0), state, action, params)
            return (obs, state), (obs.nodes, action, info["placed"])
        start = oenv.reset(jax.random.PRNGKey(1), params)
        return jax.lax.scan(body, start, None, length=params.max_steps_in_episode)[1]
    (seen0, act0, placed0), (seen1, act1, placed1) = episode(banks[0]), episode(banks[1])
    np.testing.assert_array_equal(seen0, seen1)
    np.testing.assert_array_equal(act0, act1)
    assert int(placed0.sum()) > 10 and (np.asarray(placed0) == np.asarray(placed1)).all()

    one_hot = OpenBNet(hidden=8).init(jax.random.PRNGKey(0), oenv.reset(
        jax.random.PRNGKey(0), oenv.make_params(nodes, load_pods("default", nodes), [1],
                                                subset=4, encoding="onehot"))[0])
    with pytest.raises(ValueError, match=r"trained on A10, G2, G3, P100, T4, V100M16, V100M32; "
                                         r".*\(A100-40GB, H100-80GB unknown to it\)"):
        as_policy(OpenBNet(hidden=8), one_hot, renamed.models, encoding="onehot",
                  trained_models=nodes.models)
    assert callable(as_policy(net, variables, renamed.models))     # agnostic: accepted


def test_the_zoos_one_hot_network_is_refused_on_renamed_models_naming_its_own(table):
    """Through its run's config, before any replay; the agnostic network is not."""
    from vte.openb.registration import learned_policy
    assert encoding_of_config(ckpt.load_config("zoo:openb-evidence")) == "onehot"
    renamed = tuple(sorted(RENAMED.get(m, m) for m in power.BUNDLED_MODELS))
    with pytest.raises(ValueError, match=r"openb-evidence.*trained on A10, G2, G3, P100, T4, "
                                         r"V100M16, V100M32; .*\(A100-40GB, H100-80GB unknown"):
        learned_policy("zoo:openb-evidence", renamed)
    with pytest.raises(ValueError, match=r"with 7 GPU models; this one has 6 \(A100-40GB, "
                                         r"H100-80GB unknown to it\): use the node file it "
                                         r"trained on \(one-hot: A10, G2.*, or a network of the "
                                         r"agnostic encoding"):
        learned_policy("zoo:openb-evidence", renamed[:6])
    assert callable(learned_policy("zoo:openb-evidence", power.BUNDLED_MODELS))
    # The zoo's model-agnostic network serves the renamed cluster, and any number of models.
    assert callable(learned_policy("zoo:openb-agnostic", renamed))
    assert callable(learned_policy("zoo:openb-agnostic", renamed[:6]))
