"""The window loads with GPU layers 'auto' (the default), with no GPU and with a
simulated one (TANDEM_GPU_MEMORY: a GPU of that much free memory, planned for; llama.cpp
built for the CPU runs the planned layers here all the same), and says the plan where the
user chooses and where they watch."""

from __future__ import annotations

from window_fixtures import LOAD_TIMEOUT_MS, demo_settings, wait_loaded


def test_no_gpu_the_pair_runs_on_the_cpu_and_the_panel_says_so(make_window, demo_models, qtbot, monkeypatch):
    monkeypatch.delenv("TANDEM_GPU_MEMORY", raising=False)
    window = make_window(demo_settings(demo_models))
    assert window.settings.target_gpu_layers == "auto" == window.settings.draft_gpu_layers
    wait_loaded(qtbot, window)
    assert window.client.info.gpu_layers == (0, 0)
    assert window.side_panel.gpu.plan_text.startswith("Planned: runs on the CPU")
    assert "llama.cpp allocated" in window.side_panel.gpu.plan_text


def test_a_simulated_gpu_takes_the_draft_wholly_and_part_of_the_target(make_window, demo_models, qtbot,
                                                                       monkeypatch):
    monkeypatch.setenv("TANDEM_GPU_MEMORY", "600MiB")
    window = make_window(demo_settings(demo_models))
    wait_loaded(qtbot, window)
    target_layers, draft_layers = window.client.info.gpu_layers
    assert draft_layers == 31 and 0 < target_layers <= 30
    assert f"{target_layers} of 31 target layers on the GPU; the draft wholly" in window.side_panel.gpu.plan_text

    dialog = window.open_settings()  # the Hardware page answers for the settings as edited
    qtbot.waitUntil(lambda: "target layers on the GPU" in dialog.plan_label.text(), timeout=LOAD_TIMEOUT_MS)
    dialog.editors["target_gpu_layers"].setValue(-1)  # "all": more than the simulated GPU holds beside the draft
    assert dialog.editors["target_gpu_layers"].text() == "all"
    qtbot.waitUntil(lambda: dialog.plan_label.text().startswith("Memory: does not fit"), timeout=LOAD_TIMEOUT_MS)
    dialog.editors["target_gpu_layers"].setValue(dialog.editors["target_gpu_layers"].minimum())
    assert dialog.editors["target_gpu_layers"].text() == "auto" and dialog.settings().target_gpu_layers == "auto"
    dialog.reject()
