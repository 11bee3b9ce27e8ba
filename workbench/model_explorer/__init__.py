"""Model Explorer extension: ExecuTorch / PyTorch artifacts in Google's Model Explorer.

``model-explorer --extensions=workbench.model_explorer`` imports
``workbench.model_explorer.main`` (Model Explorer loads ``<module>.main``), which registers an
adapter for ``.pte`` / ``.bpte`` / ``.pt2`` / ETRecord files and node-data providers for the
overlays (time per node from an ETDump, bytes read and written, constant bytes, the
quantisation scheme, delegated vs portable, tensor lifetime). Everything is computed by
:func:`workbench.graph` and the workbench's own trace reader: no ExecuTorch Inspector, no
``flatc``, nothing unpickled. Needs the ``graph`` extra (``ai-edge-model-explorer``).

This package imports nothing from Model Explorer until ``main`` is imported, so
``import workbench`` stays light.

Example:
    >>> from workbench.model_explorer.convert import me_graphs         # doctest: +SKIP
    >>> graphs = me_graphs("sample_models/mlp_xnnpack.pte")            # doctest: +SKIP
"""
