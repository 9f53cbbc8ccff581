"""Engine data below the planner and the catalog: the registry of engines and the flag-set format
(registry), and what an engine can do as data (capabilities). Imports neither llmbctl.planner nor
llmbctl.catalog; both import it."""
