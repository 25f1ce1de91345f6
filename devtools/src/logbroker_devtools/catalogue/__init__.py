"""Facts measured from the reference peers and kept as data in the product (names, types, defaults)."""
