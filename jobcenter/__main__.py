from .cli import main

if __name__ == "__main__":  # process-pool children import this module: they must not run it
    main()
