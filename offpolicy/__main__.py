from offpolicy.cli import main

raise SystemExit(main())
