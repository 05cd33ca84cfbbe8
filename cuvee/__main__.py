from cuvee.cli.main import main

raise SystemExit(main())
