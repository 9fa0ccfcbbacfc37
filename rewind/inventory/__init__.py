"""The inventory stream: stock levels per (sku, warehouse), the latest version wins.

A second stream unlike the demo (no watermark, no state, a ``latest`` table, a catalog join), so
that the transform contract, the sink and the contract proof are exercised by more than one
shape of stream. Nothing here imports ``rewind.demo``.
"""
