package postgres_test

import "github.com/jackc/pgx/v5"

func pgxConnect(u string) (*pgx.Conn, error) { return pgx.Connect(ctx, u) }
