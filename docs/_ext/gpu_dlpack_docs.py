"""The parts of gpu_dlpack's documentation that are generated, so that they
cannot drift from what they describe:

``explain-catalogue``
    the troubleshooting page: every entry of ``gpu_dlpack/explain.json``
    (the catalogue ``gpu_dlpack.explain`` and ``gpu-dlpack explain`` match),
    with its message pattern, meaning, remedies and the gpu_dlpack call that
    avoids it, then every hazard the doctor reports. Each entry is a section
    with the label ``explain-<id>``.
``import-contracts``
    the import-linter contracts of ``pyproject.toml`` (``[tool.importlinter]``),
    which the test command checks with ``lint-imports``.

And one check at the end of reading: every name of ``gpu_dlpack.__all__``
is documented somewhere (an ``autofunction``, ``autoclass`` or ``autodata``
of ``gpu_dlpack.<name>``); one that is not is a warning, so the build fails.
"""

from __future__ import annotations

import json
import os
import tomllib

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CATALOGUE = os.path.join(ROOT, "gpu_dlpack", "explain.json")
PYPROJECT = os.path.join(ROOT, "pyproject.toml")

# The libraries of the catalogue, in the order the page shows them.
LIBRARIES = ("gpu_dlpack", "NumPy", "PyTorch", "JAX", "CuPy")


def gpu_usable() -> bool:
    """Whether CuPy sees a GPU (the doctests marked ``:skipif: not gpu``)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _para(*children) -> nodes.paragraph:
    p = nodes.paragraph()
    for c in children:
        p += c if isinstance(c, nodes.Node) else nodes.Text(c)
    return p


def _field(name: str, *body) -> nodes.field:
    f = nodes.field()
    f += nodes.field_name(text=name)
    b = nodes.field_body()
    for node in body:
        b += node if isinstance(node, nodes.Node) else _para(node)
    f += b
    return f


def _code(text: str, language: str = "python") -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = language
    return block


class _Section(SphinxDirective):
    """A directive that builds sections under the heading it stands in."""

    def section(self, label: str, title: str, *title_nodes) -> nodes.section:
        node = nodes.section()
        node["ids"].append(nodes.make_id(label))
        node["names"].append(label)
        self.state.document.note_explicit_target(node)  # a label for {ref}
        heading = nodes.title(title, "")
        for t in title_nodes or (nodes.Text(title),):
            heading += t
        node += heading
        return node


class ExplainCatalogue(_Section):
    """Every entry of the catalogue, grouped by the library that raises it."""

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(CATALOGUE)
        with open(CATALOGUE, encoding="utf-8") as f:
            data = json.load(f)
        entries = data["errors"]
        order = {name: i for i, name in enumerate(LIBRARIES)}
        libraries = sorted({e["library"] for e in entries}, key=lambda n: (order.get(n, len(order)), n))
        out: list[nodes.Node] = []
        for library in libraries:
            mine = [e for e in entries if e["library"] == library]
            section = self.section(f"explain-library-{library.lower()}", f"Raised by {library}")
            section += _para(f"{len(mine)} known messages.")
            for entry in mine:
                section += self.entry(entry)
            out.append(section)
        hazards = self.section("explain-hazards", "Hazards the doctor reports")
        hazards += _para(
            "What ", nodes.literal(text="gpu-dlpack doctor"), " finds without any exception being raised; ",
            "each is reported with its remedy (the fields in braces are the libraries it measured).",
        )
        listing = nodes.field_list()
        for hazard_id, hazard in data["hazards"].items():
            listing += _field(hazard_id, hazard["problem"], _para("Remedy: ", hazard["remedy"]))
        hazards += listing
        out.append(hazards)
        return out

    def entry(self, e: dict) -> nodes.section:
        section = self.section(f"explain-{e['id']}", e["id"], nodes.literal(text=e["id"]))
        fields = nodes.field_list()
        fields += _field("Raised by", f"{e['library']}, as {e['exception']}")
        fields += _field("Message pattern", _code(e["pattern"], "none"))
        fields += _field("Meaning", e["meaning"])
        remedies = nodes.enumerated_list()
        for remedy in e["remedies"]:
            item = nodes.list_item()
            item += _para(remedy)
            remedies += item
        fields += _field("Remedies, in order", remedies)
        avoid = e["avoid"]
        fields += _field(
            "With gpu_dlpack",
            _para(nodes.literal(text=avoid["call"])),
            _para("Before:"), _code(avoid["before"]),
            _para("After:"), _code(avoid["after"]),
        )
        if e.get("refusal"):
            why = "gpu_dlpack declines this by design"
            rule = e.get("rule")
            if rule is not None:
                ref = addnodes.pending_xref("", nodes.inline(text=f"rule {rule}"), refdomain="std",
                                            reftype="ref", reftarget=f"rule-{rule}", refexplicit=True,
                                            refdoc=self.env.docname)
                fields += _field("Refusal", _para(f"{why}: ", ref, "."))
            else:
                fields += _field("Refusal", f"{why}.")
        section += fields
        return section


class ImportContracts(_Section):
    """The import-linter contracts, as pyproject.toml states them."""

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(PYPROJECT)
        with open(PYPROJECT, "rb") as f:
            config = tomllib.load(f)["tool"]["importlinter"]
        out = nodes.enumerated_list()
        for contract in config["contracts"]:
            item = nodes.list_item()
            item += _para(nodes.strong(text=contract["name"]), f" ({contract['type']})")
            if "layers" in contract:
                layers = nodes.bullet_list()
                for layer in contract["layers"]:
                    li = nodes.list_item()
                    li += _para(*_joined([nodes.literal(text=m.strip()) for m in layer.split("|")], " | "))
                    layers += li
                item += _para("Top to bottom:")
                item += layers
            for key, what in (("modules", "Independent"), ("source_modules", "Importers"),
                              ("forbidden_modules", "May not import")):
                if key in contract:
                    item += _para(f"{what}: ", *_joined([nodes.literal(text=m) for m in contract[key]], ", "))
            out += item
        return [out]


def _joined(items: list, sep: str) -> list:
    out: list = []
    for i, item in enumerate(items):
        if i:
            out.append(nodes.Text(sep))
        out.append(item)
    return out


def _check_every_public_name(app: Sphinx, env) -> None:
    import gpu_dlpack

    documented = set(env.get_domain("py").objects)
    for name in gpu_dlpack.__all__:
        if f"gpu_dlpack.{name}" not in documented:
            logger.warning("gpu_dlpack.%s is public (gpu_dlpack.__all__) but not in the API reference", name,
                           type="gpu_dlpack", subtype="api")


def setup(app: Sphinx) -> dict:
    app.add_directive("explain-catalogue", ExplainCatalogue)
    app.add_directive("import-contracts", ImportContracts)
    app.connect("env-check-consistency", _check_every_public_name)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
