"""Hostile artifacts, one builder module per attack class (the style of safetensors'
``attacks/`` folder): each case builds its file from a real sample in ``sample_models/`` and
states what it expects, a clear :class:`workbench.ArtifactError` subclass or a correct result,
in bounded time and memory (``test_attacks.py``)."""
