from cube.cli import main

raise SystemExit(main())
