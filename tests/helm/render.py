"""Renders and lints helm/deltakv with Helm's own engine, without a helm binary or a cluster.

Helm's Go SDK (v4) comes from the PyPI package helm-python-sdk, a ctypes binding over
libhelm_c, which the wheel bundles: templates, values merging, values.schema.json validation
and lint are Helm's code, so what passes here is what `helm template` and `helm lint` do.
Nothing here reaches the network.

As a command, it prints the manifests like `helm template`:

    python tests/helm/render.py [-f VALUES.yaml]... [--set KEY=VALUE]... [--name RELEASE]
"""
from __future__ import annotations

import argparse
import copy
import pathlib
import sys
from typing import Any, Dict, List, Optional

import helm_python as helm
import yaml

CHART_DIR = pathlib.Path(__file__).resolve().parents[2] / "helm" / "deltakv"
EXAMPLES_DIR = CHART_DIR / "examples"
NOTES = "templates/NOTES.txt"


def merge_values(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
    """`-f a -f b` semantics: maps merge key by key, anything else replaces, null deletes."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_values(*files: pathlib.Path) -> Dict[str, Any]:
    """The user values of `-f FILE...`, merged left to right (chart defaults not included)."""
    values: Dict[str, Any] = {}
    for path in files:
        doc = yaml.safe_load(pathlib.Path(path).read_text()) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: values must be a mapping")
        values = merge_values(values, doc)
    return values


def render(values: Optional[Dict[str, Any]] = None, name: str = "test",
           namespace: str = "default") -> Dict[str, str]:
    """Template path -> rendered text, as an install of release NAME would render them.

    Raises helm_python's HelmValuesError (the values break values.schema.json) or
    HelmRenderError (a template failed, e.g. a `required` value is missing)."""
    with helm.Chart.load(str(CHART_DIR)) as chart:
        return chart.render(values or {}, name=name, namespace=namespace, is_install=True)


def manifests(values: Optional[Dict[str, Any]] = None, name: str = "test",
              namespace: str = "default") -> List[Dict[str, Any]]:
    """The rendered Kubernetes objects (NOTES.txt and empty documents left out)."""
    out = []
    for path, text in sorted(render(values, name, namespace).items()):
        if path.endswith(NOTES):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                out.append(doc)
    return out


def notes(values: Optional[Dict[str, Any]] = None, name: str = "test") -> str:
    rendered = render(values, name)
    return next((text for path, text in rendered.items() if path.endswith(NOTES)), "")


def lint(values: Optional[Dict[str, Any]] = None, kube_version: str = "v1.30.0") -> Dict[str, Any]:
    """`helm lint --strict`: {"messages": [{"severity", "path", "error"}], "errors": [...]}."""
    return helm.lint(str(CHART_DIR), values or {}, strict=True, kube_version=kube_version)


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-f", "--values", action="append", default=[], type=pathlib.Path)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--name", default="deltakv")
    p.add_argument("--namespace", default="default")
    args = p.parse_args(argv)
    values = load_values(*args.values)
    for expression in args.set:
        values = merge_values(values, helm.parse_set_string(expression))
    try:
        rendered = render(values, args.name, args.namespace)
    except helm.HelmError as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 1
    for path, text in sorted(rendered.items()):
        if text.strip() and not path.endswith(NOTES):
            print(f"---\n# Source: {path}\n{text.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
