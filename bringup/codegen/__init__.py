"""Stage codegen: IR + memory plan + kernel maps -> the model's C, rendered by jinja2."""
