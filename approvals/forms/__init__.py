"""Forms by what they carry: ``filters`` (the lists' query strings), ``decisions`` (what a post
carries), ``schema`` (a form built from a tool's JSON schema)."""
