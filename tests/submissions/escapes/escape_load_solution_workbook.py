"""Hostile: loads the instructor's solved workbook from the checkout (solutions/05_triton.ipynb, found from the
installed package's path) and hands in its vector_add. In the sandbox only the package is visible, not the
checkout around it."""
from gpucourse.solutions import load_solutions

vector_add = load_solutions("05_triton")["vector_add"]
