from collsched.cli import main

raise SystemExit(main())
