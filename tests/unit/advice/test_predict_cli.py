"""`kvpilot diagnose` with predictions, on recordings vLLM 0.29.0's own scheduler and stat logger made
(tests/fixtures/recordings/vllm/): the JSON schema with `replay`/`what_if`/`predicted`, the text and markdown,
predictions withheld when the replay misses the window, `--what-if` and its errors.

That the predictions are right is tests/reference/test_counterfactual.py's (vLLM re-run with each change).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvpilot.cli import cli

ROOT = Path(__file__).resolve().parents[3]
VLLM = ROOT / "tests" / "fixtures" / "recordings" / "vllm"
SCHEMA = json.loads((ROOT / "docs" / "diagnose-output.schema.json").read_text())
# the flags the token-budget-cap recording ran with (tests/integration/diagnose/scenario_flags.py), 7B on an H100
BUDGET = ["--recording", str(VLLM / "token-budget-cap.om"), "--max-num-seqs", "128", "--max-num-batched-tokens", "256"]


def invoke(*args):
    # a budget no shared machine runs out of: what the output holds, not how fast
    return CliRunner().invoke(cli, ["diagnose", "--no-kube", "--gpu-name", "H100", "--what-if-budget", "10m", *args])


@pytest.fixture(scope="module")
def budget_run():
    """One run through the command (JSON), and the same report rendered as text and markdown."""
    result = invoke(*BUDGET, "--what-if", "replicas=2", "-o", "json")
    assert result.exit_code == 2, result.output
    return json.loads(result.output)


@pytest.fixture(scope="module")
def budget_json(budget_run):
    return budget_run


def test_json_with_predictions_validates_against_the_schema(budget_json):
    jsonschema.validate(budget_json, SCHEMA)
    (target,) = budget_json["targets"]
    replay = target["replay"]
    assert replay["matches"] is True
    assert replay["misses"] == []
    assert replay["observed"]["binding_limit"] == replay["predicted"]["binding_limit"] == "token_budget"
    # the asked change first, then the candidates for the budget: 2x and 4x (256 -> 512, 1024)
    assert [w["change"] for w in target["what_if"]][:3] == [
        {"replicas": 2},
        {"max_num_batched_tokens": 512},
        {"max_num_batched_tokens": 1024},
    ]
    assert all(w["predicted"] is not None for w in target["what_if"])
    lead = target["recommendations"][0]
    assert lead["predicted"] is not None
    assert lead["expected_effect"].startswith("The smallest change simulated")
    # the schema refuses what it must: a binding limit outside the vocabulary, an unknown what-if key
    bad = json.loads(json.dumps(budget_json))
    bad["targets"][0]["replay"]["predicted"]["binding_limit"] = "compute"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)
    bad = json.loads(json.dumps(budget_json))
    bad["targets"][0]["what_if"][0]["change"] = {"tensor_parallel_size": 2}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def _prediction(p):
    from kvpilot.diagnose.model import Prediction

    return None if p is None else Prediction(**p)


def test_text_and_markdown_show_the_replay_and_each_what_if(budget_json):
    from kvpilot.diagnose.model import Diagnosis, Replay, Report, WhatIf
    from kvpilot.diagnose.report import render

    (t,) = budget_json["targets"]
    r = t["replay"]
    diag = Diagnosis(
        t["verdict"],
        t["severity"],
        t["confidence"],
        target=t["target"],
        signals=t["signals"],
        replay=Replay(_prediction(r["predicted"]), _prediction(r["observed"]), r["matches"], notes=tuple(r["notes"])),
        what_if=[
            WhatIf(
                tuple(w["change"].items()), _prediction(w["predicted"]), w.get("reason", ""), tuple(w.get("notes", ()))
            )
            for w in t["what_if"]
        ],
    )
    report = Report(budget_json["source"], budget_json["window_seconds"], [diag])
    text = render(report, "text")
    assert "replay: the engine model reproduces the window" in text
    assert "what-if replicas=2: requests/s" in text
    assert "what-if max_num_batched_tokens=512" in text
    assert "replay  requests/s" not in text  # the replay's figures against the window: --verbose
    verbose = render(report, "text", verbose=True)
    assert "replay  requests/s" in verbose
    assert "window  requests/s" in verbose
    markdown = render(report, "markdown")
    assert "#### Replay: the engine model reproduces the window" in markdown
    assert "| `replicas=2` |" in markdown
    assert "| replay |" not in markdown
    verbose = render(report, "markdown", verbose=True)
    assert "| replay |" in verbose
    assert "| window |" in verbose


def test_a_replay_that_misses_the_window_withholds_every_prediction():
    # told max_num_seqs 2 where vLLM ran 4: the replay serves half as much, so nothing is predicted
    args = ["--recording", str(VLLM / "max-num-seqs-cap.om"), "--max-num-seqs", "2", "-o", "json"]
    (target,) = json.loads(invoke(*args, "--what-if", "max_num_seqs=16").output)["targets"]
    replay = target["replay"]
    assert replay["matches"] is False
    assert any(m.startswith("requests finished per second: replay") for m in replay["misses"])
    assert target["what_if"] == [
        {"change": {"max_num_seqs": 16}, "predicted": None, "reason": target["what_if"][0]["reason"]}
    ]
    assert target["what_if"][0]["reason"].startswith("withheld: the replay does not reproduce the window")
    assert all(r.get("predicted") is None for r in target["recommendations"])
    for rec in target["recommendations"]:
        assert rec["expected_effect"].endswith(
            "(Sized from the window's measurements; not replayed: the replay did not reproduce the window.)"
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--what-if", "max_num_seqs"], "expected KEY=VALUE"),
        (["--what-if", "lora_slots=2"], "lora_slots: unknown key"),
        (["--what-if", "replicas=2", "--no-what-if"], "--no-what-if and --what-if"),
    ],
)
def test_bad_what_ifs_are_usage_errors(args, message):
    result = invoke(*BUDGET, *args)
    assert result.exit_code == 64
    assert message in result.output


def test_no_what_if_is_the_diagnosis_alone():
    (target,) = json.loads(invoke(*BUDGET, "--no-what-if", "-o", "json").output)["targets"]
    assert "replay" not in target
    assert "what_if" not in target
    assert target["recommendations"][0]["expected_effect"].startswith("up to 512 tokens per step")


def test_quick_has_no_predictions(monkeypatch):
    import kvpilot.diagnose.run as run_module
    from kvpilot.advice.run import AdviceOptions, diagnose_and_predict
    from kvpilot.diagnose.model import Report

    asked = []
    monkeypatch.setattr(run_module, "run", lambda opts: asked.append(opts) or Report("metrics-url x", 3.0, []))
    report = diagnose_and_predict(run_module.Options(metrics_url="http://10.0.0.7:8000/metrics", quick=True))
    assert report.notes == ["--quick: no predictions (a replay needs a window of scrapes, not two)."]
    assert not asked[0].fit_signals
    # predictions turned off: the diagnosis alone, no note
    assert diagnose_and_predict(run_module.Options(recording="r.om"), AdviceOptions(budget_seconds=0)).notes == []


# the flags the max-num-seqs-cap recording ran with (tests/integration/diagnose/scenario_flags.py), 1.5B on an H100
CAP = [
    "--recording",
    str(VLLM / "max-num-seqs-cap.om"),
    "--max-num-seqs",
    "4",
    "--max-num-batched-tokens",
    "8192",
    "--max-model-len",
    "8192",
    "--gpu-memory",
    "80GiB",
]


# the flags the kv-exhaustion recording ran with: max_num_seqs 256, budget 2048, 1.5B on a 24 GiB L4
KV = [
    "--recording",
    str(VLLM / "kv-exhaustion.om"),
    "--max-num-seqs",
    "256",
    "--max-num-batched-tokens",
    "2048",
    "--max-model-len",
    "8192",
    "--gpu-memory",
    "24GiB",
]


def _json(*args):
    result = invoke(*args, "-o", "json")
    assert result.exit_code in (1, 2), result.output
    (target,) = json.loads(result.output)["targets"]
    return target


def test_a_kv_cache_too_small_for_the_windows_prompts_is_not_simulated():
    # 100 KV tokens are 6 blocks: vLLM would start only with max_model_len <= 80, and reject the window's prompts
    # (314 and 690 tokens), so nothing is "served" by it and it is never recommended
    target = _json(*CAP, "--what-if", "kv_cache_tokens=100")
    (tiny,) = [w for w in target["what_if"] if w["change"] == {"kv_cache_tokens": 100}]
    assert tiny["predicted"] is None
    assert "reject the window's prompts of up to 690 tokens" in tiny["reason"]
    assert target["recommendations"][0]["flag"] == "--max-num-seqs"
    assert target["recommendations"][0]["suggested"] == 16


def test_the_lead_is_the_smallest_change_that_keeps_up_not_the_first_asked():
    # max_num_seqs=10000 keeps up too (and is simulated first), but 4 -> 16 is the smaller change
    target = _json(*CAP, "--what-if", "max_num_seqs=10000")
    assert target["what_if"][0]["change"] == {"max_num_seqs": 10000}
    assert target["what_if"][0]["predicted"]["queue_growing"] is False
    lead = target["recommendations"][0]
    assert (lead["flag"], lead["current"], lead["suggested"]) == ("--max-num-seqs", 4, 16)
    # the budget vLLM needs beside it is said, in JSON and in the text
    assert target["what_if"][0]["notes"] == [
        "max_num_batched_tokens raised to 10000: vLLM requires it >= max_num_seqs."
    ]
    text = invoke(*CAP, "--what-if", "max_num_seqs=10000").output
    assert "(max_num_batched_tokens raised to 10000: vLLM requires it >= max_num_seqs.)" in " ".join(text.split())


def test_a_rule_predicted_to_make_things_worse_is_not_recommended():
    # kv-exhaustion (L4, 24 GiB): the rule's max_num_seqs 256 -> 14 cuts preemptions but serves fewer requests
    # with a longer queue in the simulation: its what-if stays, the recommendation goes
    target = _json(*KV)
    before = target["replay"]["predicted"]
    (fewer,) = [w for w in target["what_if"] if w["change"] == {"max_num_seqs": 14}]
    after = fewer["predicted"]
    assert after["requests_finished_per_s"] < before["requests_finished_per_s"]
    assert after["queue_time_mean_s"] > before["queue_time_mean_s"]
    assert not [r for r in target["recommendations"] if r["flag"] == "--max-num-seqs"]
    assert target["recommendations"], "the other changes are still recommended"


def test_a_replicas_what_if_says_which_figures_are_per_replica():
    # rates are all replicas' together, the gauges one replica's (docs/diagnosis.md, "Predictions")
    text = " ".join(invoke(*CAP, "--what-if", "replicas=2", "--verbose").output.split())
    line = text.split("what-if replicas=2: ", 1)[1].split(" what-if ", 1)[0]
    assert re.search(r"^requests/s [0-9.]+, queue time", line)
    assert re.search(r"running [0-9.]+ per replica, waiting [0-9.]+ per replica", line)
    assert re.search(r"KV peak [0-9.]+ % per replica", line)
    replay = text.split("replay requests/s", 1)[1].split(" window ", 1)[0]
    assert "per replica" not in replay  # one server: no label


@pytest.mark.parametrize("window", ["20s", "30s"])
def test_a_short_window_s_replay_counts_the_queue_it_starts_with(window):
    # the window opens on 620 waiting requests (vLLM's gauge at its start): the replay's first scrape counts
    # them too, so its queue grows as the window's does (about 2.5/s, less than the 5.4 req/s arriving), and the
    # lead is the cap, as on the whole recording, not 9 replicas
    target = _json(*CAP, "--window", window)
    replay = target["replay"]
    assert replay["matches"] is True
    predicted, observed = replay["predicted"], replay["observed"]
    assert predicted["waiting_trend_per_s"] == pytest.approx(observed["waiting_trend_per_s"], rel=0.1)
    assert predicted["waiting_trend_per_s"] < 5.4
    lead = target["recommendations"][0]
    assert (lead["flag"], lead["suggested"]) == ("--max-num-seqs", 16)
    # its mean queue time barely moves in so short a window (109 -> 103 s at 20 s): the backlog's, and said so
    seconds = window.removesuffix("s")
    assert re.search(
        rf"The window opens on 6[0-9]{{2}} waiting requests, which its {seconds} s cannot drain",
        lead["expected_effect"],
    )


def test_a_what_if_for_a_target_with_nothing_to_replay_says_so():
    # an idle window has no workload to fit: the change asked for is answered with a note, not silence
    result = invoke("--recording", str(VLLM / "idle.om"), "--what-if", "max_num_seqs=2")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "note: --what-if not simulated for (recording) qwen2.5-7b engine 0: idle, no traffic in the window" in text
    # without --what-if an idle target gets no note: nothing was asked
    assert "--what-if not simulated" not in " ".join(invoke("--recording", str(VLLM / "idle.om")).output.split())


def test_a_budget_that_runs_out_says_its_own_size_and_answers_each_what_if():
    # 1 ms is not "0 s", and the target the budget did not reach still lists the change asked for
    result = CliRunner().invoke(
        cli, ["diagnose", "--no-kube", "--gpu-name", "H100", *CAP, "--what-if-budget", "1ms", "--what-if", "replicas=2"]
    )
    text = " ".join(result.output.split())
    assert "the what-if budget of 0.001 s ran out (--what-if-budget)" in text
    assert "what-if replicas=2: not replayed: the what-if budget ran out (--what-if-budget)" in text


def test_flags_and_replicas_asked_together_are_never_advised_as_replicas_alone():
    # fp8 with 2 replicas keeps up; 2 replicas alone do not (the queue still grows): the lead must not say
    # "replicas 1 -> 2" with fp8's numbers; it is the fewest replicas that keep up alone, and names the asked pair
    target = _json(*KV, "--what-if", "kv_cache_dtype=fp8,replicas=2", "--what-if", "replicas=2")
    by = {tuple(w["change"].items()): w["predicted"] for w in target["what_if"]}
    assert by[(("kv_cache_dtype", "fp8"), ("replicas", 2))]["queue_growing"] is False
    assert by[(("replicas", 2),)]["queue_growing"] is True
    lead = target["recommendations"][0]
    assert lead["flag"] == "replicas (scale out)"
    assert lead["suggested"] > 2
    assert by[(("replicas", lead["suggested"]),)]["queue_growing"] is False
    assert "As asked, kv_cache_dtype=fp8, replicas=2 keeps up too" in lead["expected_effect"]


def test_refused_what_ifs_read_once_and_in_words():
    text = " ".join(
        invoke(*KV, "--what-if", "gpu_memory_utilization=0.05", "--what-if", "max_num_batched_tokens=2").output.split()
    )
    # the line names the change once; no negative token count
    assert "what-if max_num_batched_tokens=2: vLLM requires it >= max_num_seqs (256)" in text
    assert "what-if gpu_memory_utilization=0.05: vLLM would not start: the change leaves no GPU memory" in text
    assert "leaves -" not in text


def test_a_window_of_one_scrape_is_not_counted_as_predicted_and_its_trend_reads_unknown():
    text = " ".join(invoke(*CAP, "--window", "5s").output.split())
    assert "note: Replayed and predicted 0 of 1 targets" in text
    assert "its trend unknown: one scrape in 5 s" in text
    assert "unknown req/s" not in text


def test_on_the_whole_recording_the_cure_s_queue_time_speaks_for_itself():
    # 300 s: 65.8 s -> 0.00225 s; no backlog sentence
    target = _json(*CAP)
    assert target["recommendations"][0]["suggested"] == 16
    assert "The window opens on" not in target["recommendations"][0]["expected_effect"]


@pytest.mark.parametrize("asked", ["max_num_seqs=8", "max_num_seqs=6"])
def test_a_what_if_adds_its_prediction_and_never_changes_the_recommendation(asked):
    # 4 -> 8 (or 6) is a smaller change than the advice's own 4 -> 16: asked for, it is predicted, but the
    # recommendation made without it stays the lead, with the same prediction
    alone = _json(*CAP)
    target = _json(*CAP, "--what-if", asked)
    key, value = asked.split("=")
    (mine,) = [w for w in target["what_if"] if w["change"] == {key: int(value)}]
    assert mine["predicted"] is not None
    assert target["recommendations"][0] == alone["recommendations"][0]
    assert [r["flag"] for r in target["recommendations"]] == [r["flag"] for r in alone["recommendations"]]


def test_without_a_replay_the_kv_advice_is_sized_from_the_shortfall_and_says_so():
    # kv-exhaustion: 17 requests in KV, 1.30 req/s served while the queue grows by 2.79: 17 x 4.09 / 1.30 = 53.4
    # keep up, +25 % = 66.7 requests x 2,194 tokens = 146,357 KV tokens, 4.47x the 32,768 there are: fp8's
    # 65,536 fall short, so 5 servers (ceil(146,357 / 32,768)) come first; never 0.92 -> 0.95 alone as the fix
    target = _json(*KV, "--no-what-if")
    lead = target["recommendations"][0]
    assert (lead["flag"], lead["suggested"]) == ("replicas (scale out)", 5)
    assert "146,357 KV tokens needed" in lead["expected_effect"]
    for rec in target["recommendations"]:
        assert rec["expected_effect"].endswith(
            "(Sized from the window's measurements; not replayed: predictions turned off (--no-what-if).)"
        )
    dtype = next(r for r in target["recommendations"] if r["flag"] == "--kv-cache-dtype")
    assert "short of the 146,357 needed" in dtype["expected_effect"]


def test_the_replay_runs_the_served_models_own_profile_from_its_config():
    # the recording's model_name names no engine profile: without its config.json Qwen2.5-7B's shape is assumed
    # and said; with it (a 70B), its own layers and weights, and nothing assumed
    config = ROOT / "tests" / "fixtures" / "hf-configs" / "meta-llama__Llama-3.1-70B-Instruct.json"
    own = _json(*CAP, "--model-config", str(config))
    step = own["replay"]["step_time"]
    assert step["model_source"] == "config.json"
    assert not any("Qwen2.5-7B's weights and shape assumed" in n for n in own["replay"]["notes"])
    assert any("(its config.json)" in n for n in own["replay"]["notes"])


@pytest.mark.parametrize("fmt", ["json", "text", "markdown"])
def test_a_token_in_the_model_name_behind_a_control_character_is_in_no_output(tmp_path, fmt):
    """model_name="HF_TO<BEL>KEN=<token>": the step time's note quoted the label with repr(), which wrote the BEL out
    as the four characters \\x07, and redaction did not see HF_TOKEN= through them: the token was in the JSON.
    """
    text = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "scenario_kv-exhaustion.om").read_text()
    path = tmp_path / "token.om"
    path.write_text(text.replace('model_name="qwen2.5-1.5b"', 'model_name="HF_TO\x07KEN=' + "B" * 24 + '"'))
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", fmt])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "REDACTED" in result.output  # the label itself, redacted (Markdown escapes its brackets)
    assert "B" * 24 not in result.output
