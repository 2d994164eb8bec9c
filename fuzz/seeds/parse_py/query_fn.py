# A pandas-style query over the column `x` of a CSV: the mask, the selected row
# indices and how many rows matched.
def query(x: float[n]):
    mask = (x > 2.0) & (x < 6.0)
    return mask, filter(mask), sum(mask)
