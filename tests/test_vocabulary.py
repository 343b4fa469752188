"""One definition of each vocabulary (harness.vocabulary), and the package's public API."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import types

import pytest

from harness.cases import load_case
from harness.estimate import Components, Estimate, MemoryBytes, estimate
from harness.vocabulary import (
    BATCH_STATUSES,
    COMPONENTS,
    CURVE_FAMILIES,
    ESTIMATE_STATUSES,
    MEMORY_FIGURES,
    VIEWS,
    Term,
    Vocabulary,
)

from conftest import CASES_DIR, ROOT


def test_the_vocabularies_name_what_the_documentation_names():
    # Written out here, independently of the module, so that a rename or a reordering is a visible decision.
    assert VIEWS == ("peak_only", "system_evidence")
    assert CURVE_FAMILIES == ("matrix", "vector", "memory", "network", "launch", "output_layer",
                              "collective_curves", "hierarchical", "partitioned_p2p", "gradient_accumulation",
                              "grouped_gemm")
    assert CURVE_FAMILIES.of_kind("calculon") == ("matrix", "vector", "memory", "network")
    assert COMPONENTS == ("forward", "backward", "optimizer", "recompute", "tensor_parallel", "pipeline_parallel",
                          "data_parallel", "recommunication", "pipeline_bubble", "forward_offload", "backward_offload")
    assert MEMORY_FIGURES == ("weight", "activation", "activation_checkpoint", "weight_grad", "activation_grad",
                              "optimizer", "tier1_total", "tier2_total")
    assert ESTIMATE_STATUSES == ("ok", "infeasible") and BATCH_STATUSES == ("ok", "infeasible", "rejected", "invalid")
    assert COMPONENTS.of_kind("step") == ("optimizer", "data_parallel")
    assert COMPONENTS.of_kind("bubble") == ("pipeline_bubble",)


@pytest.mark.parametrize("model, vocabulary", [(Components, COMPONENTS), (MemoryBytes, MEMORY_FIGURES)])
def test_estimate_models_are_generated_from_the_vocabulary(model, vocabulary):
    assert tuple(model.model_fields) == tuple(vocabulary)
    assert [f.description for f in model.model_fields.values()] == [vocabulary.description(n) for n in vocabulary]
    assert model.model_config["frozen"] and model.model_config["extra"] == "forbid"


def test_an_estimate_reports_every_name_in_vocabulary_order():
    est = estimate(load_case(CASES_DIR / "gpt3-175B_seqsel.yaml").estimate_input())
    assert tuple(est.views) == tuple(VIEWS)
    for view in est.views.values():
        assert tuple(view.components_s.model_dump()) == tuple(COMPONENTS)
        assert tuple(view.memory_bytes.model_dump()) == tuple(MEMORY_FIGURES)
    with pytest.raises(ValueError, match="Input should be 'ok' or 'infeasible'"):
        Estimate.model_validate(est.model_dump() | {"status": "rejected"})


def test_require_names_the_place_that_did_not_follow():
    COMPONENTS.require(reversed(COMPONENTS), "anywhere")  # any order unless ordered=True
    with pytest.raises(TypeError, match=r"harness\.x\.TABLE: must name exactly the timing components of harness"
                                        r"\.vocabulary: missing \['backward_offload'\], unknown \['bubble'\]"):
        COMPONENTS.require([*COMPONENTS[:-1], "bubble"], "harness.x.TABLE")
    with pytest.raises(TypeError, match="in order"):
        CURVE_FAMILIES.require(reversed(CURVE_FAMILIES), "harness.y", ordered=True)
    with pytest.raises(TypeError, match="got"):
        VIEWS.require(["peak_only", "peak_only", "system_evidence"], "twice")


def test_a_vocabulary_refuses_duplicate_or_non_identifier_names_and_survives_pickling():
    with pytest.raises(ValueError, match="unique lower-case identifiers"):
        Vocabulary("thing", Term("a", "A."), Term("a", "Again."))
    with pytest.raises(ValueError, match="unique lower-case identifiers"):
        Vocabulary("thing", Term("Not-An-Identifier", "."))
    copy = pickle.loads(pickle.dumps(COMPONENTS))
    assert copy == COMPONENTS and copy.terms == COMPONENTS.terms and copy.title == COMPONENTS.title
    with pytest.raises(KeyError, match="'bubble' is not a timing component"):
        COMPONENTS.description("bubble")


def test_a_new_component_without_its_calculon_field_fails_at_import():
    """Adding a component is one vocabulary entry plus its rules: a forgotten mapping is an import error."""
    code = ("import harness.vocabulary as v\n"
            "v.COMPONENTS = v.Vocabulary(v.COMPONENTS.title, *v.COMPONENTS.terms, "
            "v.Term('host_transfer', 'Host transfers.', 'pipeline'))\n"
            "import harness.oracles.calculon\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1
    assert "must name exactly the timing components" in run.stderr and "missing ['host_transfer']" in run.stderr


def test_a_new_component_and_a_new_curve_family_reach_the_concrete_plan_and_the_plots():
    """The ConcretePlanIR's command components and the plot palettes derive from the vocabulary: a new pipeline
    component is a command component (the bubble never is), and a new family (one beyond the vocabulary's
    colours Set1 has) gets a colour of its own."""
    code = ("import importlib, typing, harness.vocabulary as v, harness.ir.concrete as c\n"
            "import harness.evidence.profile  # before the new family: it would (rightly) ask for the family's rules\n"
            "original = v.COMPONENTS\n"
            "v.COMPONENTS = v.Vocabulary(original.title, *original.terms, "
            "v.Term('host_transfer', 'Host.', 'pipeline'))\n"
            "print(' '.join(typing.get_args(importlib.reload(c).Component)))  # imported before the change\n"
            "v.COMPONENTS = original  # the rest of the harness would (rightly) ask for the new component's rules\n"
            "v.CURVE_FAMILIES = v.Vocabulary(v.CURVE_FAMILIES.title, *v.CURVE_FAMILIES.terms, "
            "v.Term('host_memory', 'Host memory.', 'measured'))\n"
            "from harness.report.plots import FAMILY_COLORS\n"
            "print(list(FAMILY_COLORS)[-1], len(set(FAMILY_COLORS.values())))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "MPLBACKEND": "Agg"})
    assert run.returncode == 0, run.stderr
    components, colours = run.stdout.splitlines()
    assert components.split() == [*(n for n in COMPONENTS if n != "pipeline_bubble"), "host_transfer"]
    assert colours == f"host_memory {len(CURVE_FAMILIES) + 1}" == "host_memory 12"


def test_the_package_does_not_shadow_the_estimate_module():
    import harness
    import harness.estimate as module

    assert isinstance(module, types.ModuleType) and module.estimate is harness.estimate_input
    assert harness.estimate is module
    code = "import harness.estimate as E, types; print(isinstance(E, types.ModuleType), callable(E.estimate))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.stdout.split() == ["True", "True"], run.stderr


def test_the_portable_columns_are_the_terms_not_marked_concrete_only():
    """PORTABLE_COMPONENTS and TIER1_MEMORY_FIGURES come from the terms (no slice of a closed length): the
    offload components and the tier-2 total are the concrete-only ones, and a new concrete-only term is left
    out wherever it is placed."""
    from harness.vocabulary import COMPONENTS, MEMORY_FIGURES, PORTABLE_COMPONENTS, TIER1_MEMORY_FIGURES, Term, Vocabulary

    assert PORTABLE_COMPONENTS == ("forward", "backward", "optimizer", "recompute", "tensor_parallel",
                                   "pipeline_parallel", "data_parallel", "recommunication", "pipeline_bubble")
    assert [n for n in COMPONENTS if n not in PORTABLE_COMPONENTS] == ["forward_offload", "backward_offload"]
    assert [n for n in MEMORY_FIGURES if n not in TIER1_MEMORY_FIGURES] == ["tier2_total"]
    grown = Vocabulary("example", Term("a", "A."), Term("late", "Late.", concrete_only=True), Term("b", "B."))
    assert grown.portable() == ("a", "b") and tuple(grown) == ("a", "late", "b")


@pytest.mark.parametrize("call, field, message", [
    (lambda h, data: h.estimate_input(None), "data", "must be an EstimateInput"),
    (lambda h, data: h.estimate_input(data.model_dump(exclude_none=True)), "data", "got dict"),
    (lambda h, data: h.estimate_input("cases/megatron-22B_full.yaml"), "data", "harness.load_case(path)"),
    (lambda h, data: h.estimate_input(data, views=("bogus",)), "views[0]", "'bogus' is not a cost view"),
    (lambda h, data: h.estimate_input(data, views=("peak_only", 3)), "views[1]", "3 is not a cost view"),
    (lambda h, data: h.estimate_input(data, views="peak_only"), "views", "a tuple of one: views=('peak_only',)"),
    (lambda h, data: h.estimate_input(data, views=None), "views", "got NoneType"),
    (lambda h, data: h.estimate_input(data, evidence_dir=5), "evidence_dir", "a directory path"),
    (lambda h, data: h.load_case(None), "path", "must be a case file's path (str or os.PathLike), got NoneType"),
    (lambda h, data: h.load_case(5), "path", "got int"),
])
def test_the_public_api_refuses_arguments_of_the_wrong_type_with_its_own_error(call, field, message):
    import harness
    from harness.errors import InputError

    data = harness.load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    with pytest.raises(InputError) as caught:
        call(harness, data)
    error = caught.value
    assert (error.source, error.field) == ("<input>", field) and message in error.message, str(error)
    assert str(error).startswith(f"<input>: {field}: ") and "\n" not in str(error)


def test_the_public_api_takes_view_names_and_names_its_source():
    import harness
    from harness.cost.views import COST_VIEWS
    from harness.errors import InputError

    data = harness.load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    by_name = harness.estimate_input(data, views=["peak_only"])
    by_view = harness.estimate_input(data, views=(COST_VIEWS["peak_only"],))
    assert list(by_name.views) == ["peak_only"] and by_name == by_view
    assert harness.estimate_input(data, views=tuple(VIEWS)) == harness.estimate_input(data)
    with pytest.raises(InputError, match=r"^mine: views: "):
        harness.estimate_input(data, views=None, source="mine")
