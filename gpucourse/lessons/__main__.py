"""`python -m gpucourse.lessons`: print the README's lesson table, generated from the LESSON declarations."""
from gpucourse.lessons import readme_table

print(readme_table())
