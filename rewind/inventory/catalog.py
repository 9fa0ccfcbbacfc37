"""The product catalog: a static reference table the inventory stream joins every record with.

Why a committed file and not a generator call at run time: the stream, its replays and the proof
must all join with exactly the same rows (a deterministic transform), so the catalog is data that
ships with the package (``catalog.csv``). ``generate_catalog`` made it once (``python -m
rewind.inventory.catalog`` writes it again, byte for byte: ``tests/test_inventory.py`` checks).

Prices have two decimals; ``stock_value`` is ``quantity * unit_price`` as IEEE doubles, computed the
same way by Spark (``build``) and by pandas (``expect``), so both give the same bits.
"""

from __future__ import annotations

import functools
import random
from importlib import resources
from pathlib import Path

import pandas as pd

CATALOG_FILE = "catalog.csv"
COLUMNS = ("sku", "product_name", "category", "unit_price")
SIZE = 200
SEED = 15
CATEGORIES = {
    "tools": ("Hammer", "Wrench", "Screwdriver", "Drill", "Saw", "Pliers"),
    "garden": ("Hose", "Rake", "Shovel", "Planter", "Sprinkler", "Trowel"),
    "kitchen": ("Kettle", "Pan", "Knife", "Blender", "Toaster", "Colander"),
    "office": ("Stapler", "Notebook", "Desk Lamp", "Binder", "Pen Set", "Monitor Arm"),
    "outdoor": ("Tent", "Lantern", "Backpack", "Sleeping Bag", "Cooler", "Camp Stove"),
    "electrical": ("Cable", "Socket", "Switch", "Bulb", "Extension Lead", "Fuse Box"),
    "bathroom": ("Towel Rail", "Mirror", "Shower Head", "Soap Dish", "Bath Mat", "Tap"),
    "storage": ("Shelf", "Crate", "Box", "Hook Rail", "Cabinet", "Drawer Unit"),
}
ADJECTIVES = ("Basic", "Compact", "Heavy-Duty", "Pro", "Eco", "Classic", "Deluxe", "Mini")


def sku_for(n: int) -> str:
    """The catalog's n-th SKU (1-based): ``SKU-00001`` ... ``SKU-00200``."""
    return f"SKU-{n:05d}"


def generate_catalog(size: int = SIZE, seed: int = SEED) -> pd.DataFrame:
    """The catalog as it was generated (deterministic: the same size and seed give the same rows)."""
    rng = random.Random(seed)
    names = list(CATEGORIES)
    rows = []
    for n in range(1, size + 1):
        category = names[(n - 1) % len(names)]
        product = f"{rng.choice(ADJECTIVES)} {rng.choice(CATEGORIES[category])} {n:03d}"
        cents = rng.randrange(99, 250_000)  # 0.99 .. 2,499.99
        rows.append((sku_for(n), product, category, cents / 100))
    return pd.DataFrame(rows, columns=list(COLUMNS))


@functools.lru_cache(maxsize=1)
def _load() -> pd.DataFrame:
    with resources.files(__package__).joinpath(CATALOG_FILE).open("r", encoding="utf-8") as f:
        frame = pd.read_csv(f, dtype={"sku": str, "product_name": str, "category": str, "unit_price": "float64"},
                            float_precision="round_trip", keep_default_na=False)
    if list(frame.columns) != list(COLUMNS) or frame["sku"].duplicated().any():
        raise ValueError(f"{CATALOG_FILE}: expected columns {COLUMNS} and unique SKUs")
    return frame


def load_catalog() -> pd.DataFrame:
    """The catalog (sku, product_name, category, unit_price), one row per SKU; a fresh copy each call."""
    return _load().copy()


def write_catalog(path: Path) -> None:
    generate_catalog().to_csv(path, index=False, lineterminator="\n")


if __name__ == "__main__":
    write_catalog(Path(__file__).with_name(CATALOG_FILE))
