"""Sub-networks of the user's trained Llama model: faster shapes that inherit its weights, their quality measured.

Read in this order:

- ``genes``: the space (per layer kept or dropped, key/value groups kept, SwiGLU channels kept) and the
  architecture a point of it describes;
- ``windows``: the user's text as calibration and held-out token windows, disjoint;
- ``parent``: the trained weights checked once, and a PyTorch model around any state_dict;
- ``importance``: one calibration pass measuring each layer, group and channel;
- ``slicing``: a point's weights, slices of the parent's (keeping everything gives the parent);
- ``forward`` and ``loss``: held-out loss in nats per token and perplexity;
- ``heuristics``: the known prunings (ShortGPT's layer removal, uniform width) as points of the space.

Everything here needs torch (``ltsedge[search]``).
"""
