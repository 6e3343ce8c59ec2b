"""What a page shows, prepared for its template: presenters, one module per thing shown.

``run`` a run's card and a decision's outcome, ``call`` one parked call (its title, arguments, why it
waits, its deadline, its forms), ``args`` arguments by type, ``fields`` form fields as markup,
``text`` model output and stored values as text (JSON, invisible characters made visible),
``record`` an ended run's record, ``batch`` a bulk decision's preview and progress. Nothing here
decides or writes: the views hand these to the templates.
"""
