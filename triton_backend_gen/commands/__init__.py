"""Commands: one module per command's orchestration, the only layer that combines building and running.

The CLI maps flags onto one function of one of these modules; the stages below never import them.
"""
