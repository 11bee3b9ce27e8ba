"""The module Model Explorer imports (``--extensions=workbench.model_explorer``): a thin
adapter and node-data providers over :mod:`workbench.model_explorer.convert`.

Example:
    >>> from model_explorer.extension_manager import ExtensionManager      # doctest: +SKIP
    >>> em = ExtensionManager(["workbench.model_explorer"]); em.load_extensions()  # doctest: +SKIP
    >>> em.run_cmd({"extensionId": "workbench_adapter", "cmdId": "convert",
    ...             "modelPath": "sample_models/mlp_xnnpack.pte", "settings": {}})  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, ClassVar

from model_explorer import (
    Adapter,
    AdapterMetadata,
    GetConfigEditorsResult,
    ModelExplorerGraphs,
    NodeDataProvider,
    NodeDataProviderFilter,
    NodeDataProviderMetadata,
    NodeDataProviderResult,
)
from model_explorer import config_editor as ce
from model_explorer import node_data_builder as ndb

from ..errors import ArtifactError
from .convert import OVERLAYS, me_graphs, overlay_values

__all__ = ["WorkbenchAdapter", "WorkbenchOverlays"]

ADAPTER_ID = "workbench_adapter"
FILE_EXTS = ["pte", "bpte", "pt2", "etrecord", "ep", "ff"]


class WorkbenchAdapter(Adapter):
    """ExecuTorch ``.pte`` / ``.bpte``, ``.pt2`` and ETRecord files as graphs (one per method).

    Example:
        >>> WorkbenchAdapter().convert("sample_models/mlp_xnnpack.pte", {})  # doctest: +SKIP
    """

    metadata: ClassVar[AdapterMetadata] = AdapterMetadata(
        id=ADAPTER_ID, name="Workbench: ExecuTorch / PyTorch programs",
        description="Programs as graphs from the workbench's frames: instructions, XNNPACK "
                    "delegates expanded, tensors on the edges (no torch, no flatc)",
        source_repo="", fileExts=FILE_EXTS)

    def __init__(self) -> None:
        super().__init__()

    def convert(self, model_path: str, settings: dict) -> ModelExplorerGraphs:
        """``{"graphs": [...]}``; a bad file raises an ``ArtifactError`` naming the file and
        the structure, which Model Explorer's server answers as ``{"error": ...}``."""
        return {"graphs": me_graphs(model_path)}


class WorkbenchOverlays(NodeDataProvider):
    """Overlays on the workbench's graphs: time per node (ETDump), bytes, constant bytes,
    quantisation scheme, delegated vs portable, tensor lifetime.

    Example:
        >>> WorkbenchOverlays().run("workbench_bytes", "sample_models/mlp_portable.pte",
        ...                         "forward", {}, None)                     # doctest: +SKIP
    """

    metadata: ClassVar[list[NodeDataProviderMetadata]] = [NodeDataProviderMetadata(
        id=pid, name=name, description=desc, icon="insights",
        filter=NodeDataProviderFilter(adapterIds=[ADAPTER_ID]))
        for pid, (name, desc) in OVERLAYS.items()]

    def __init__(self) -> None:
        super().__init__()

    def get_config_editors(self, provider_id: str) -> GetConfigEditorsResult:
        """The time overlay asks for the ETDump (default: ``<model>.etdp`` next to it)."""
        if provider_id != "workbench_time":
            return GetConfigEditorsResult(configEditors=[])
        return GetConfigEditorsResult(configEditors=[ce.TextInputConfigEditor(
            id="etdump", label="ETDump (.etdp)", required=False,
            description="path of the trace; empty: <model>.etdp next to the model")])

    def run(self, provider_id: str, model_path: str, graph_id: str, config_values: dict,
            graph: Any) -> NodeDataProviderResult:
        """The overlay's values; a bad file or a missing trace is the result's ``error``."""
        try:
            values = overlay_values(provider_id, model_path, graph_id,
                                    (config_values or {}).get("etdump") or None)
        except (ArtifactError, FileNotFoundError, KeyError, ValueError) as e:
            return NodeDataProviderResult(error=f"{type(e).__name__}: {e}")
        gradient = [ndb.GradientItem(stop=0, bgColor="#e3f2fd"),
                    ndb.GradientItem(stop=1, bgColor="#d32f2f")]
        return NodeDataProviderResult(result=ndb.GraphNodeData(
            results={k: ndb.NodeDataResult(value=v) for k, v in values.items()},
            gradient=gradient))
