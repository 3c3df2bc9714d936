"""Adaptive input embeddings and the tied adaptive softmax, shared by the backbones that use them.

``params.py`` (cluster layout and parameter counts, no torch), ``model.py`` (the PyTorch modules),
``graph.py`` (the same computation as ONNX nodes).
"""
