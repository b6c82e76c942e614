from milp_planner.cli import main

raise SystemExit(main())
