"""The mechanisms package is pure numpy: importable, and importing nothing of Django (DEVELOPERS.md layout)."""
import subprocess
import sys


def test_mechanisms_imports_without_django():
    code = ("import sys, mechanisms, mechanisms.estimators, mechanisms.rappor, mechanisms.audit, mechanisms.numeric,"
            " mechanisms.uldp, mechanisms.rr3, mechanisms.private_sampling, mechanisms.surveys;"
            "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'));"
            "assert not bad, bad; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": "."})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_section_9_names_exist():
    import mechanisms
    from mechanisms import estimators

    for name in ["keep_probability", "perturb", "step_probabilities", "step_matrix", "relax", "bridge", "tighten",
                 "chain"]:
        assert callable(getattr(mechanisms, name))
    for name in ["frequencies", "frequency_variance", "confidence_intervals", "mean"]:
        assert callable(getattr(estimators, name))
