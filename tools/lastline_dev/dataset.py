"""The demo's and the tests' own dataset: a film rental store (database `store`), generated from a seed.

Written for lastline, so that `make demo` and `make test` need nothing outside the repository. The same seed
gives the same SQL, byte for byte. It has what a backup and restore must carry exactly: foreign keys (one
pair circular), triggers that write another table, views, functions, procedures, an event, a FULLTEXT and a
SPATIAL index, BLOBs, JSON with virtual and stored generated columns, a partitioned table, a sequence, ENUM,
SET, YEAR and TIMESTAMP columns, and a table whose name and columns hold spaces, quotes, dots and backticks.
A system-versioned table lives in a database of its own (`store_history`, on request), since a logical
backup refuses those. The last thing loaded is the marker `store.dataset_info` (seed, version, row counts):
a load that stopped half way has none, and `holds()` says so.

    python -m lastline_dev.dataset --seed 43 > store.sql
"""
from __future__ import annotations

import argparse
import functools
import json
import random
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from lastline.core.servers import Server
from lastline.core.sql import qualified, quote_ident

DATABASE = "store"
HISTORY_DATABASE = "store_history"
DEFAULT_SEED = 43
VERSION = 1  # bump when the generator's output changes: a source holding an older version is rebuilt
MARKER = "dataset_info"
# the table whose name needs every kind of quoting (a dot, a space, both quotes, a backtick)
ODD_TABLE = "gift card's \"ledger\".v2 `x`"
BATCH = 500  # rows per INSERT

_SYL = ("ka", "lo", "ve", "ri", "sa", "mon", "ta", "del", "ne", "bri", "or", "quin", "ha", "zu", "pel", "an", "mar",
        "tis", "co", "ly", "ber", "dra", "fen", "gol", "ju", "ex", "wi", "yo")
_ADJ = ("Academy", "Ace", "Adaptation", "Affair", "African", "Agent", "Airport", "Alabama", "Alamo", "Alien", "Amadeus",
        "Amelie", "Anaconda", "Angels", "Annie", "Anthem", "Apollo", "Arabia", "Argonauts", "Arizona", "Armageddon",
        "Attacks", "Autumn", "Baby", "Badman", "Ballroom", "Bang", "Barefoot", "Beach", "Bear", "Bed", "Bilko",
        "Birds", "Blade", "Blanket", "Blues", "Boiled", "Bound", "Brannigan", "Bride", "Bubble", "Bull", "Cabin",
        "Caddyshack", "Canyon", "Caper", "Carol", "Casper", "Celebrity", "Chamber", "Chaplin", "Chicken", "Cider",
        "Clerks", "Clockwork", "Closer", "Clueless", "Coast", "Comforts", "Conquerer", "Creatures", "Crooked")
_NOUN = ("Dinosaur", "Egg", "Frisbee", "Gown", "Harbor", "Island", "Jungle", "Kiss", "Lady", "Mile", "Nightmare",
         "Oath", "Patriot", "Quest", "River", "Saga", "Trap", "Uprising", "Velvet", "Wardrobe", "Yentl", "Zorro",
         "Rider", "Storm", "Garden", "Empire", "Lamb", "Dragon", "Lion", "Submarine", "Wedding", "Cowboy")
_WORDS = ("a", "epic", "drama", "of", "an", "astronaut", "and", "moose", "who", "must", "fight", "shark", "in",
          "ancient", "china", "boring", "story", "feminist", "dentist", "outgun", "car", "the", "gulf", "mexico",
          "stunning", "reflection", "lumberjack", "pursue", "monkey", "shark", "tank", "abandoned", "mine", "shaft",
          "beautiful", "documentary", "composer", "robot", "sink", "canadian", "rockies", "manhattan", "penthouse")
_CATEGORIES = ("Action", "Animation", "Children", "Classics", "Comedy", "Documentary", "Drama", "Family", "Foreign",
               "Games", "Horror", "Music", "New", "Sci-Fi", "Sports", "Travel")
_LANGUAGES = ("English", "Italian", "Japanese", "Mandarin", "French", "German")
_RATINGS = ("G", "PG", "PG-13", "R", "NC-17")
_FEATURES = ("Trailers", "Commentaries", "Deleted Scenes", "Behind the Scenes")
# a few values with what quoting and character sets must carry
_ODD_TEXT = ("Zoë's \"café\"", "tab\there", "line\nbreak", "back\\slash", "Łódź", "日本語", "emoji 🎬", "100%_match")
_EPOCH = datetime(2005, 5, 24, 22, 53, 30)
_STAMP = "2006-02-15 05:03:42"  # every last_update: the data is the same wherever and whenever it is loaded

SCHEMA = """
CREATE TABLE language (
  language_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT, name CHAR(20) NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (language_id)) ENGINE=InnoDB;
CREATE TABLE category (
  category_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT, name VARCHAR(25) NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (category_id)) ENGINE=InnoDB;
CREATE TABLE country (
  country_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, country VARCHAR(50) NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (country_id)) ENGINE=InnoDB;
CREATE TABLE city (
  city_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, city VARCHAR(50) NOT NULL, country_id SMALLINT UNSIGNED NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (city_id), KEY idx_fk_country_id (country_id),
  CONSTRAINT fk_city_country FOREIGN KEY (country_id) REFERENCES country (country_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE address (
  address_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, address VARCHAR(50) NOT NULL, address2 VARCHAR(50) DEFAULT NULL,
  district VARCHAR(20) NOT NULL, city_id SMALLINT UNSIGNED NOT NULL, postal_code VARCHAR(10) DEFAULT NULL,
  phone VARCHAR(20) NOT NULL, location GEOMETRY NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (address_id), KEY idx_fk_city_id (city_id), SPATIAL KEY idx_location (location),
  CONSTRAINT fk_address_city FOREIGN KEY (city_id) REFERENCES city (city_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE actor (
  actor_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, first_name VARCHAR(45) NOT NULL, last_name VARCHAR(45) NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (actor_id), KEY idx_actor_last_name (last_name)) ENGINE=InnoDB;
CREATE TABLE staff (
  staff_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT, first_name VARCHAR(45) NOT NULL, last_name VARCHAR(45) NOT NULL,
  address_id SMALLINT UNSIGNED NOT NULL, picture BLOB DEFAULT NULL, email VARCHAR(50) DEFAULT NULL,
  store_id TINYINT UNSIGNED NOT NULL, active BOOLEAN NOT NULL DEFAULT TRUE, username VARCHAR(16) NOT NULL,
  password VARCHAR(40) BINARY DEFAULT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (staff_id), KEY idx_fk_store_id (store_id), KEY idx_fk_address_id (address_id),
  CONSTRAINT fk_staff_store FOREIGN KEY (store_id) REFERENCES store (store_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_staff_address FOREIGN KEY (address_id) REFERENCES address (address_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE store (
  store_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT, manager_staff_id TINYINT UNSIGNED NOT NULL,
  address_id SMALLINT UNSIGNED NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (store_id), UNIQUE KEY idx_unique_manager (manager_staff_id), KEY idx_fk_address_id (address_id),
  CONSTRAINT fk_store_staff FOREIGN KEY (manager_staff_id) REFERENCES staff (staff_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_store_address FOREIGN KEY (address_id) REFERENCES address (address_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE customer (
  customer_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, store_id TINYINT UNSIGNED NOT NULL,
  first_name VARCHAR(45) NOT NULL, last_name VARCHAR(45) NOT NULL, email VARCHAR(50) DEFAULT NULL,
  address_id SMALLINT UNSIGNED NOT NULL, active BOOLEAN NOT NULL DEFAULT TRUE, create_date DATETIME NOT NULL,
  last_update TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (customer_id), KEY idx_fk_store_id (store_id), KEY idx_fk_address_id (address_id),
  KEY idx_last_name (last_name),
  CONSTRAINT fk_customer_address FOREIGN KEY (address_id) REFERENCES address (address_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_customer_store FOREIGN KEY (store_id) REFERENCES store (store_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE film (
  film_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, title VARCHAR(255) NOT NULL, description TEXT DEFAULT NULL,
  release_year YEAR DEFAULT NULL, language_id TINYINT UNSIGNED NOT NULL, original_language_id TINYINT UNSIGNED DEFAULT NULL,
  rental_duration TINYINT UNSIGNED NOT NULL DEFAULT 3, rental_rate DECIMAL(4,2) NOT NULL DEFAULT 4.99,
  length SMALLINT UNSIGNED DEFAULT NULL, replacement_cost DECIMAL(5,2) NOT NULL DEFAULT 19.99,
  rating ENUM('G','PG','PG-13','R','NC-17') DEFAULT 'G',
  special_features SET('Trailers','Commentaries','Deleted Scenes','Behind the Scenes') DEFAULT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (film_id), KEY idx_title (title), KEY idx_fk_language_id (language_id),
  KEY idx_fk_original_language_id (original_language_id),
  CONSTRAINT fk_film_language FOREIGN KEY (language_id) REFERENCES language (language_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_film_language_original FOREIGN KEY (original_language_id) REFERENCES language (language_id)
    ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE film_text (
  film_id SMALLINT NOT NULL, title VARCHAR(255) NOT NULL, description TEXT,
  PRIMARY KEY (film_id), FULLTEXT KEY idx_title_description (title, description)) ENGINE=InnoDB;
CREATE TABLE film_actor (
  actor_id SMALLINT UNSIGNED NOT NULL, film_id SMALLINT UNSIGNED NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (actor_id, film_id), KEY idx_fk_film_id (film_id),
  CONSTRAINT fk_film_actor_actor FOREIGN KEY (actor_id) REFERENCES actor (actor_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_film_actor_film FOREIGN KEY (film_id) REFERENCES film (film_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE film_category (
  film_id SMALLINT UNSIGNED NOT NULL, category_id TINYINT UNSIGNED NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (film_id, category_id),
  CONSTRAINT fk_film_category_film FOREIGN KEY (film_id) REFERENCES film (film_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_film_category_category FOREIGN KEY (category_id) REFERENCES category (category_id)
    ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE inventory (
  inventory_id MEDIUMINT UNSIGNED NOT NULL AUTO_INCREMENT, film_id SMALLINT UNSIGNED NOT NULL,
  store_id TINYINT UNSIGNED NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (inventory_id), KEY idx_fk_film_id (film_id), KEY idx_store_id_film_id (store_id, film_id),
  CONSTRAINT fk_inventory_store FOREIGN KEY (store_id) REFERENCES store (store_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_inventory_film FOREIGN KEY (film_id) REFERENCES film (film_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE rental (
  rental_id INT NOT NULL AUTO_INCREMENT, rental_date DATETIME NOT NULL, inventory_id MEDIUMINT UNSIGNED NOT NULL,
  customer_id SMALLINT UNSIGNED NOT NULL, return_date DATETIME DEFAULT NULL, staff_id TINYINT UNSIGNED NOT NULL,
  last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (rental_id), UNIQUE KEY rental_date (rental_date, inventory_id, customer_id),
  KEY idx_fk_inventory_id (inventory_id), KEY idx_fk_customer_id (customer_id), KEY idx_fk_staff_id (staff_id),
  CONSTRAINT fk_rental_staff FOREIGN KEY (staff_id) REFERENCES staff (staff_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_rental_inventory FOREIGN KEY (inventory_id) REFERENCES inventory (inventory_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_rental_customer FOREIGN KEY (customer_id) REFERENCES customer (customer_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE payment (
  payment_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, customer_id SMALLINT UNSIGNED NOT NULL,
  staff_id TINYINT UNSIGNED NOT NULL, rental_id INT DEFAULT NULL, amount DECIMAL(5,2) NOT NULL,
  payment_date DATETIME NOT NULL, last_update TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (payment_id), KEY idx_fk_staff_id (staff_id), KEY idx_fk_customer_id (customer_id),
  CONSTRAINT fk_payment_rental FOREIGN KEY (rental_id) REFERENCES rental (rental_id) ON DELETE SET NULL ON UPDATE CASCADE,
  CONSTRAINT fk_payment_customer FOREIGN KEY (customer_id) REFERENCES customer (customer_id) ON DELETE RESTRICT ON UPDATE CASCADE,
  CONSTRAINT fk_payment_staff FOREIGN KEY (staff_id) REFERENCES staff (staff_id) ON DELETE RESTRICT ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE film_poster (
  film_id SMALLINT UNSIGNED NOT NULL, mime VARCHAR(32) NOT NULL, image MEDIUMBLOB NOT NULL,
  PRIMARY KEY (film_id),
  CONSTRAINT fk_film_poster_film FOREIGN KEY (film_id) REFERENCES film (film_id) ON DELETE CASCADE ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE customer_preference (
  customer_id SMALLINT UNSIGNED NOT NULL, prefs JSON NOT NULL,
  genre VARCHAR(25) AS (JSON_UNQUOTE(JSON_EXTRACT(prefs, '$.genre'))) VIRTUAL,
  max_rate DECIMAL(4,2) AS (JSON_EXTRACT(prefs, '$.max_rate')) STORED,
  PRIMARY KEY (customer_id), KEY idx_max_rate (max_rate),
  CONSTRAINT fk_preference_customer FOREIGN KEY (customer_id) REFERENCES customer (customer_id)
    ON DELETE CASCADE ON UPDATE CASCADE
) ENGINE=InnoDB;
CREATE TABLE rental_log (
  log_id INT UNSIGNED NOT NULL, logged_at DATETIME NOT NULL, rental_id INT NOT NULL, what VARCHAR(20) NOT NULL,
  PRIMARY KEY (log_id, logged_at), KEY idx_rental_id (rental_id)
) ENGINE=InnoDB
PARTITION BY RANGE COLUMNS (logged_at) (
  PARTITION p2005 VALUES LESS THAN ('2006-01-01'),
  PARTITION p2006 VALUES LESS THAN ('2007-01-01'),
  PARTITION pmax VALUES LESS THAN (MAXVALUE));
CREATE TABLE `gift card's "ledger".v2 ``x``` (
  `card no.` INT UNSIGNED NOT NULL, `holder's "name"` VARCHAR(60) NOT NULL, `balance $` DECIMAL(7,2) NOT NULL,
  `note ``quoted``` TEXT NULL, PRIMARY KEY (`card no.`), KEY `by holder's name` (`holder's "name"`)
) ENGINE=InnoDB;
CREATE SEQUENCE invoice_number START WITH 1000 INCREMENT BY 1 CACHE 20;
"""

VIEWS_AND_ROUTINES = """
CREATE VIEW customer_list AS
SELECT cu.customer_id AS ID, CONCAT(cu.first_name, ' ', cu.last_name) AS name, a.address AS address,
  a.postal_code AS `zip code`, a.phone AS phone, city.city AS city, country.country AS country,
  IF(cu.active, 'active', '') AS notes, cu.store_id AS SID
FROM customer AS cu JOIN address AS a ON cu.address_id = a.address_id JOIN city ON a.city_id = city.city_id
  JOIN country ON city.country_id = country.country_id;
CREATE VIEW staff_list AS
SELECT s.staff_id AS ID, CONCAT(s.first_name, ' ', s.last_name) AS name, a.address AS address,
  a.postal_code AS `zip code`, a.phone AS phone, city.city AS city, country.country AS country, s.store_id AS SID
FROM staff AS s JOIN address AS a ON s.address_id = a.address_id JOIN city ON a.city_id = city.city_id
  JOIN country ON city.country_id = country.country_id;
CREATE VIEW film_list AS
SELECT film.film_id AS FID, film.title AS title, film.description AS description, category.name AS category,
  film.rental_rate AS price, film.length AS length, film.rating AS rating,
  GROUP_CONCAT(CONCAT(actor.first_name, ' ', actor.last_name) SEPARATOR ', ') AS actors
FROM category LEFT JOIN film_category ON category.category_id = film_category.category_id
  LEFT JOIN film ON film_category.film_id = film.film_id JOIN film_actor ON film.film_id = film_actor.film_id
  JOIN actor ON film_actor.actor_id = actor.actor_id
GROUP BY film.film_id, category.name;
CREATE VIEW sales_by_store AS
SELECT CONCAT(c.city, ',', cy.country) AS store, CONCAT(m.first_name, ' ', m.last_name) AS manager,
  SUM(p.amount) AS total_sales
FROM payment AS p JOIN rental AS r ON p.rental_id = r.rental_id JOIN inventory AS i ON r.inventory_id = i.inventory_id
  JOIN store AS s ON i.store_id = s.store_id JOIN address AS a ON s.address_id = a.address_id
  JOIN city AS c ON a.city_id = c.city_id JOIN country AS cy ON c.country_id = cy.country_id
  JOIN staff AS m ON s.manager_staff_id = m.staff_id
GROUP BY s.store_id ORDER BY cy.country, c.city;
CREATE VIEW sales_by_film_category AS
SELECT c.name AS category, SUM(p.amount) AS total_sales
FROM payment AS p JOIN rental AS r ON p.rental_id = r.rental_id JOIN inventory AS i ON r.inventory_id = i.inventory_id
  JOIN film_category AS fc ON i.film_id = fc.film_id JOIN category AS c ON fc.category_id = c.category_id
GROUP BY c.name ORDER BY total_sales DESC;
CREATE DEFINER=CURRENT_USER SQL SECURITY INVOKER VIEW actor_info AS
SELECT a.actor_id, a.first_name, a.last_name,
  GROUP_CONCAT(DISTINCT c.name ORDER BY c.name SEPARATOR '; ') AS categories, COUNT(DISTINCT fa.film_id) AS films
FROM actor a LEFT JOIN film_actor fa ON a.actor_id = fa.actor_id
  LEFT JOIN film_category fc ON fa.film_id = fc.film_id LEFT JOIN category c ON fc.category_id = c.category_id
GROUP BY a.actor_id, a.first_name, a.last_name;
CREATE VIEW `odd "view".of gift cards` AS SELECT `card no.`, `balance $` FROM `gift card's "ledger".v2 ``x```;
DELIMITER ;;
CREATE FUNCTION inventory_held_by_customer(p_inventory_id INT) RETURNS INT
READS SQL DATA
BEGIN
  DECLARE v_customer_id INT;
  DECLARE EXIT HANDLER FOR NOT FOUND RETURN NULL;
  SELECT customer_id INTO v_customer_id FROM rental
   WHERE return_date IS NULL AND inventory_id = p_inventory_id LIMIT 1;
  RETURN v_customer_id;
END;;
CREATE FUNCTION inventory_in_stock(p_inventory_id INT) RETURNS BOOLEAN
READS SQL DATA
BEGIN
  DECLARE v_out INT;
  SELECT COUNT(*) INTO v_out FROM rental WHERE inventory_id = p_inventory_id AND return_date IS NULL;
  RETURN v_out = 0;
END;;
CREATE FUNCTION get_customer_balance(p_customer_id INT, p_effective_date DATETIME) RETURNS DECIMAL(7,2)
DETERMINISTIC READS SQL DATA
BEGIN
  DECLARE v_fees DECIMAL(7,2);
  DECLARE v_paid DECIMAL(7,2);
  SELECT IFNULL(SUM(f.rental_rate), 0) INTO v_fees FROM rental r JOIN inventory i ON i.inventory_id = r.inventory_id
    JOIN film f ON f.film_id = i.film_id WHERE r.customer_id = p_customer_id AND r.rental_date <= p_effective_date;
  SELECT IFNULL(SUM(amount), 0) INTO v_paid FROM payment
   WHERE customer_id = p_customer_id AND payment_date <= p_effective_date;
  RETURN v_fees - v_paid;
END;;
CREATE PROCEDURE film_in_stock(IN p_film_id INT, IN p_store_id INT, OUT p_film_count INT)
READS SQL DATA
BEGIN
  SELECT COUNT(*) INTO p_film_count FROM inventory
   WHERE film_id = p_film_id AND store_id = p_store_id AND inventory_in_stock(inventory_id);
END;;
CREATE PROCEDURE film_not_in_stock(IN p_film_id INT, IN p_store_id INT, OUT p_film_count INT)
READS SQL DATA
BEGIN
  SELECT COUNT(*) INTO p_film_count FROM inventory
   WHERE film_id = p_film_id AND store_id = p_store_id AND NOT inventory_in_stock(inventory_id);
END;;
CREATE PROCEDURE rewards_report(IN min_purchases TINYINT UNSIGNED, IN min_amount DECIMAL(10,2), OUT rewardees INT)
READS SQL DATA
COMMENT 'The customers who spent at least min_amount in at least min_purchases payments'
BEGIN
  SELECT COUNT(*) INTO rewardees FROM (
    SELECT customer_id FROM payment GROUP BY customer_id
    HAVING SUM(amount) >= min_amount AND COUNT(*) >= min_purchases) AS best;
END;;
CREATE TRIGGER ins_film AFTER INSERT ON film FOR EACH ROW
BEGIN
  INSERT INTO film_text (film_id, title, description) VALUES (NEW.film_id, NEW.title, NEW.description);
END;;
CREATE TRIGGER upd_film AFTER UPDATE ON film FOR EACH ROW
BEGIN
  IF (OLD.title != NEW.title) OR (OLD.description != NEW.description) OR (OLD.film_id != NEW.film_id) THEN
    UPDATE film_text SET title = NEW.title, description = NEW.description, film_id = NEW.film_id
     WHERE film_id = OLD.film_id;
  END IF;
END;;
CREATE TRIGGER del_film AFTER DELETE ON film FOR EACH ROW
BEGIN
  DELETE FROM film_text WHERE film_id = OLD.film_id;
END;;
CREATE TRIGGER customer_create_date BEFORE INSERT ON customer FOR EACH ROW SET NEW.create_date = NOW();;
CREATE TRIGGER payment_date BEFORE INSERT ON payment FOR EACH ROW SET NEW.payment_date = NOW();;
CREATE TRIGGER rental_date BEFORE INSERT ON rental FOR EACH ROW SET NEW.rental_date = NOW();;
CREATE EVENT purge_rental_log ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00' DISABLE
COMMENT 'Drops log rows older than two years'
DO DELETE FROM rental_log WHERE logged_at < NOW() - INTERVAL 2 YEAR;;
DELIMITER ;
"""

HISTORY = """
CREATE DATABASE {db} CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
USE {db};
CREATE TABLE rental_rate (film_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY, rate DECIMAL(4,2) NOT NULL)
  ENGINE=InnoDB WITH SYSTEM VERSIONING;
"""


@dataclass(frozen=True)
class Dataset:
    """The generated SQL and what it holds."""

    seed: int
    sql: str
    rows: dict[str, int]  # table -> rows, every base table of `store` (the marker included)
    versioned: bool

    @property
    def tables(self) -> list[str]:
        return sorted(self.rows)


def _lit(value: object) -> str:
    """An SQL literal for a Python value (bytes as hex)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, bytes):
        return f"X'{value.hex()}'" if value else "''"
    if isinstance(value, datetime):
        return f"'{value:%Y-%m-%d %H:%M:%S}'"
    if isinstance(value, Raw):
        return value.sql
    text = str(value).replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t")
    return f"'{text}'"


@dataclass(frozen=True)
class Raw:
    """An SQL expression written as is (a function call)."""

    sql: str


def _inserts(table: str, columns: Iterable[str], rows: list[tuple]) -> list[str]:
    """Multi-row INSERTs of `rows`, BATCH at a time."""
    head = f"INSERT INTO {quote_ident(table)} ({', '.join(quote_ident(c) for c in columns)}) VALUES\n"
    return [head + ",\n".join("(" + ", ".join(_lit(v) for v in row) + ")" for row in rows[i:i + BATCH]) + ";"
            for i in range(0, len(rows), BATCH)]


class _Gen:
    """One seed's random choices, in a fixed order."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def name(self, syllables: tuple[int, int] = (2, 3)) -> str:
        n = self.r.randint(*syllables)
        return "".join(self.r.choice(_SYL) for _ in range(n)).capitalize()

    def unique_names(self, count: int, make: Callable[[], str]) -> list[str]:
        seen: list[str] = []
        taken: set[str] = set()
        while len(seen) < count:
            name = make()
            if name.lower() not in taken:
                taken.add(name.lower())
                seen.append(name)
        return seen

    def sentence(self, words: int) -> str:
        return " ".join(self.r.choice(_WORDS) for _ in range(words)).capitalize()

    def blob(self, low: int, high: int) -> bytes:
        """Bytes of every value, the ones escaping must carry (NUL, tab, newline, backslash) among them."""
        return self.r.randbytes(self.r.randint(low, high)) + b"\x00\t\n\\"


@functools.lru_cache(maxsize=4)
def generate(seed: int = DEFAULT_SEED, versioned: bool = False) -> Dataset:
    """The SQL that (re)creates `store` from `seed` (and `store_history` when `versioned`), and its row counts."""
    g = _Gen(seed)
    r = g.r
    data: dict[str, tuple[list[str], list[tuple]]] = {}

    def table(name: str, columns: str, rows: list[tuple]) -> None:
        data[name] = (columns.split(), rows)

    table("language", "language_id name last_update", [(i, n, _STAMP) for i, n in enumerate(_LANGUAGES, 1)])
    table("category", "category_id name last_update", [(i, n, _STAMP) for i, n in enumerate(_CATEGORIES, 1)])
    countries = g.unique_names(109, lambda: g.name((2, 4)))
    countries[7], countries[41] = "Côte d'Ivoire", "Réunion"  # quotes and accents in ordinary data
    table("country", "country_id country last_update", [(i, n, _STAMP) for i, n in enumerate(countries, 1)])
    cities = g.unique_names(600, lambda: g.name((2, 4)) + r.choice(("", "", " City", "ville", " Bay")))
    for i, odd in enumerate(_ODD_TEXT):
        cities[13 + 37 * i] = odd
    table("city", "city_id city country_id last_update",
          [(i, n, r.randint(1, len(countries)), _STAMP) for i, n in enumerate(cities, 1)])
    addresses = []
    for i in range(1, 604):
        lon, lat = round(r.uniform(-180, 180), 6), round(r.uniform(-85, 85), 6)
        addresses.append((i, f"{r.randint(1, 1999)} {g.name()} {r.choice(('Street', 'Avenue', 'Drive', 'Lane'))}",
                          None if r.random() < 0.9 else "", g.name()[:20], r.randint(1, len(cities)),
                          None if r.random() < 0.05 else f"{r.randint(10000, 99999)}",
                          f"{r.randint(10**10, 10**12 - 1)}", Raw(f"ST_GeomFromText('POINT({lon} {lat})')"), _STAMP))
    table("address", "address_id address address2 district city_id postal_code phone location last_update", addresses)
    table("actor", "actor_id first_name last_name last_update",
          [(i, g.name().upper(), g.name((2, 4)).upper(), _STAMP) for i in range(1, 201)])
    table("store", "store_id manager_staff_id address_id last_update", [(1, 1, 1, _STAMP), (2, 2, 2, _STAMP)])
    table("staff", "staff_id first_name last_name address_id picture email store_id active username password last_update",
          [(i, g.name(), g.name(), i + 2, g.blob(2000, 6000), f"staff{i}@store.example", i, True, f"staff{i}",
            "".join(r.choice("0123456789abcdef") for _ in range(40)), _STAMP) for i in (1, 2)])
    customers = []
    for i in range(1, 600):
        first, last = g.name(), g.name((2, 4))
        created = _EPOCH - timedelta(days=r.randint(30, 400), seconds=r.randint(0, 86399))
        customers.append((i, r.randint(1, 2), first.upper(), last.upper(), f"{first}.{last}@customer.example".lower(),
                          i + 4, r.random() > 0.03, created, _STAMP))
    table("customer", "customer_id store_id first_name last_name email address_id active create_date last_update", customers)
    titles = g.unique_names(1000, lambda: f"{r.choice(_ADJ)} {r.choice(_NOUN)}".upper())
    films, texts = [], []
    for i, title in enumerate(titles, 1):
        desc = f"A {g.sentence(r.randint(8, 16))}"
        feats = ",".join(f for f in _FEATURES if r.random() < 0.4) or None
        films.append((i, title, desc, 2006, 1, None if r.random() < 0.9 else r.randint(2, 6), r.randint(3, 7),
                      r.choice((0.99, 2.99, 4.99)), r.randint(46, 185), r.choice((9.99, 14.99, 19.99, 24.99, 29.99)),
                      r.choice(_RATINGS), feats, _STAMP))
        texts.append((i, title, desc))
    table("film", "film_id title description release_year language_id original_language_id rental_duration rental_rate "
          "length replacement_cost rating special_features last_update", films)
    table("film_text", "film_id title description", texts)
    pairs = sorted({(r.randint(1, 200), f) for f in range(1, 1001) for _ in range(r.randint(1, 10))})
    table("film_actor", "actor_id film_id last_update", [(a, f, _STAMP) for a, f in pairs])
    table("film_category", "film_id category_id last_update", [(f, r.randint(1, 16), _STAMP) for f in range(1, 1001)])
    inventory = [(f, s) for f in range(1, 1001) for s in (1, 2) for _ in range(r.choice((0, 1, 2, 2, 3, 3, 4)))]
    table("inventory", "inventory_id film_id store_id last_update",
          [(i, f, s, _STAMP) for i, (f, s) in enumerate(inventory, 1)])
    rentals: list[tuple] = []
    payments: list[tuple] = []
    log: list[tuple] = []
    when = _EPOCH
    rates = {f[0]: f[7] for f in films}
    for i in range(1, 16045):
        when += timedelta(seconds=r.randint(60, 1500))
        inv = r.randint(1, len(inventory))
        cust = r.randint(1, 599)
        back = None if i > 16044 - 183 else when + timedelta(days=r.randint(1, 9), seconds=r.randint(0, 86399))
        staff = r.randint(1, 2)
        rentals.append((i, when, inv, cust, back, staff, _STAMP))
        payments.append((cust, staff, i, round(rates[inventory[inv - 1][0]] + r.choice((0, 0, 0, 1, 2, 3)), 2), when))
        if i % 5 == 0:
            log.append((len(log) + 1, when, i, r.choice(("rented", "returned", "late", "lost"))))
    table("rental", "rental_id rental_date inventory_id customer_id return_date staff_id last_update", rentals)
    for _ in range(5):  # payments without a rental (ON DELETE SET NULL kept them)
        payments.append((r.randint(1, 599), 1, None, 0.99, when))
    table("payment", "payment_id customer_id staff_id rental_id amount payment_date last_update",
          [(i, *p, _STAMP) for i, p in enumerate(payments, 1)])
    table("film_poster", "film_id mime image",
          [(f, "image/x-store", g.blob(1000, 8000)) for f in sorted(r.sample(range(1, 1001), 150))])
    prefs = []
    for c in range(1, 600):
        doc = {"genre": r.choice(_CATEGORIES), "max_rate": r.choice((0.99, 2.99, 4.99)),
               "languages": sorted(r.sample(_LANGUAGES, r.randint(1, 3))), "newsletter": r.random() < 0.5,
               "note": r.choice(("", "Zoë \"the critic\"", "back\\slash", "tab\there"))}
        prefs.append((c, json.dumps(doc, ensure_ascii=False, sort_keys=True)))
    table("customer_preference", "customer_id prefs", prefs)
    table("rental_log", "log_id logged_at rental_id what", log)
    data[ODD_TABLE] = (["card no.", "holder's \"name\"", "balance $", "note `quoted`"],
                       [(n, r.choice(customers)[2] + r.choice(("", "'s", ' "jr"')), round(r.uniform(0, 500), 2),
                         r.choice((None, "", "it's `odd`", "a.b.c", "x\ny"))) for n in range(1, 65)])

    rows = {name: len(v[1]) for name, v in data.items()}
    rows[MARKER] = 1
    rows["invoice_number"] = 1  # a sequence is a table of one row
    parts = [
        "SET NAMES utf8mb4;", "SET time_zone = '+00:00';", "SET FOREIGN_KEY_CHECKS = 0;", "SET UNIQUE_CHECKS = 0;",
        "SET sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';",
        f"DROP DATABASE IF EXISTS {quote_ident(DATABASE)};",
        f"CREATE DATABASE {quote_ident(DATABASE)} CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;",
        f"USE {quote_ident(DATABASE)};", SCHEMA.strip(),
    ]
    for name, (columns, values) in data.items():
        parts += _inserts(name, columns, values)
    parts.append(VIEWS_AND_ROUTINES.strip())  # the triggers after the rows: loading fires none of them
    if versioned:
        parts.append(f"DROP DATABASE IF EXISTS {quote_ident(HISTORY_DATABASE)};")
        parts.append(HISTORY.format(db=quote_ident(HISTORY_DATABASE)).strip())
        parts += _inserts("rental_rate", ["film_id", "rate"], [(f[0], f[7]) for f in films])
        parts.append("UPDATE rental_rate SET rate = rate + 1 WHERE film_id % 7 = 0;")  # history rows
        parts.append(f"USE {quote_ident(DATABASE)};")
    marker_rows = {k: v for k, v in sorted(rows.items())}
    parts.append(f"CREATE TABLE {MARKER} (seed BIGINT NOT NULL PRIMARY KEY, version INT NOT NULL, tables_rows JSON NOT NULL) "
                 "ENGINE=InnoDB;")
    parts.append(f"INSERT INTO {MARKER} VALUES ({int(seed)}, {VERSION}, {_lit(json.dumps(marker_rows, sort_keys=True))});")
    parts.append("SET FOREIGN_KEY_CHECKS = 1;")
    return Dataset(seed=seed, sql="\n".join(parts) + "\n", rows=rows, versioned=versioned)


def holds(server: Server, seed: int = DEFAULT_SEED) -> str | None:
    """None when `server` holds this seed's dataset whole (its marker and every table's row count), else what is amiss."""
    expected = generate(seed).rows
    with server.session() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (DATABASE,))
        present = {t for (t,) in cur.fetchall()}
        if MARKER not in present:
            return f"no {DATABASE}.{MARKER} (a load that never finished, or no dataset)"
        cur.execute(f"SELECT seed, version FROM {qualified(DATABASE, MARKER)}")
        found = cur.fetchall()
        if [tuple(row) for row in found] != [(seed, VERSION)]:
            return f"{DATABASE}.{MARKER} says {found}, not seed {seed} version {VERSION}"
        for name, n in sorted(expected.items()):
            if name not in present:
                return f"{DATABASE}.{name} is missing"
            if name == "invoice_number":
                continue
            cur.execute(f"SELECT COUNT(*) FROM {qualified(DATABASE, name)}")
            got = cur.fetchone()[0]
            if got != n:
                return f"{DATABASE}.{name} has {got} rows, not {n}"
    return None


def main(argv: list[str] | None = None) -> int:
    """Print the SQL of a seed."""
    p = argparse.ArgumentParser(prog="python -m lastline_dev.dataset", description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--versioned", action="store_true", help=f"also {HISTORY_DATABASE} (a system-versioned table)")
    args = p.parse_args(argv)
    sys.stdout.write(generate(args.seed, args.versioned).sql)
    return 0


if __name__ == "__main__":
    sys.exit(main())
